"""`kvctl plan ...` and `kvctl addr` through the real CLI (typer's CliRunner on the root app)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

MANIFEST = str(Path(__file__).resolve().parents[2] / "examples" / "layouts" / "seed000_0x03F.yaml")
# Seed 003 napkin 0.7's inputs: 80 GB per GPU, 140 GB of weights (17.5 GB per GPU at TP=8),
# 4.5 GB reserve, 10% headroom.
NAPKIN_0_7 = ["--hbm-gb", "80", "--gpus", "8", "--tp", "8", "--weights-gb", "140", "--reserve-gb", "4.5",
              "--headroom", "0.1", "--context", "32768", "--output", "2048", "--shared-tokens", "24576"]


def run(*args):
    return CliRunner().invoke(app, list(args))


def run_json(*args):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_help_lists_every_subcommand():
    """`kvctl plan --help` names all eight planners."""
    result = run("plan", "--help")
    assert result.exit_code == 0
    for name in ("capacity", "retention", "chunked-prefill", "block-size", "cow", "vmm", "shared-prefix",
                 "recommend"):
        assert name in result.stdout


def test_capacity_json_reproduces_napkin_0_7():
    """Seed 003 napkin 0.7 via flags: max_trajectories_unshared 36, max_trajectories_shared 122."""
    doc = run_json("plan", "capacity", "--bytes-per-token", "327680", *NAPKIN_0_7)
    assert (doc["max_trajectories_unshared"], doc["max_trajectories_shared"]) == (36, 122)


def test_capacity_from_model_and_params():
    """--model Llama-3.1-70B --params-b 70 derives 17.5 GB weights per GPU and the same 36 / 122."""
    args = [a for a in NAPKIN_0_7 if a not in ("--weights-gb", "140")]
    doc = run_json("plan", "capacity", "--model", "Llama-3.1-70B", "--params-b", "70", *args)
    assert doc["split"]["weights_bytes"] == 17_500_000_000
    assert (doc["max_trajectories_unshared"], doc["max_trajectories_shared"]) == (36, 122)


def test_capacity_table_has_why_lines():
    """The human rendering shows the ceilings and one why line per conclusion."""
    result = run("plan", "capacity", "--bytes-per-token", "327680", *NAPKIN_0_7)
    assert result.exit_code == 0
    assert "why: holding 24,576 shared tokens once lifts that to 122 (3.39x)" in result.stdout


def test_capacity_hbm_overrides_the_gpu_preset_as_in_size():
    """--hbm-gb overrides --gpu's capacity (as in `kvctl size`); 80GiB and 85.899345920 GB
    are the same bytes."""
    binary = run_json("plan", "capacity", "--bytes-per-token", "327680", "--gpu", "H100",
                      *[a if a != "80" else "80GiB" for a in NAPKIN_0_7])
    assert binary["split"]["hbm_bytes"] == 85_899_345_920
    decimal = run_json("plan", "capacity", "--bytes-per-token", "327680", "--gpu", "H100", *NAPKIN_0_7)
    assert decimal["split"]["hbm_bytes"] == 80_000_000_000


def test_capacity_runtime_gb_is_a_hidden_alias_of_reserve_gb():
    """The old `--runtime-gb 4.5` still works and gives napkin 0.7's 36 / 122."""
    args = ["--runtime-gb" if a == "--reserve-gb" else a for a in NAPKIN_0_7]
    doc = run_json("plan", "capacity", "--bytes-per-token", "327680", *args)
    assert doc["split"]["runtime_bytes"] == 4_500_000_000
    assert (doc["max_trajectories_unshared"], doc["max_trajectories_shared"]) == (36, 122)


def test_capacity_prints_its_assumptions():
    """Defaults are printed and marked: the 4.5 GB reserve, 10% headroom, the H100 preset."""
    result = run("plan", "capacity", "--bytes-per-token", "327680", "--gpus", "8", "--tp", "8",
                 "--params-b", "70", "--context", "32768", "--output", "2048")
    assert result.exit_code == 0, result.output
    assert "assumes: reserve: 4.50 GB (4.19 GiB) per device (default: seed 003 napkin 0.7)" in result.stdout
    assert "assumes: headroom: 10% of pool tokens kept free (default: seed 003 napkin 0.7)" in result.stdout
    assert "assumes: HBM: 80.00 GiB (85.90 GB) per device (default: preset H100-SXM)" in result.stdout


def test_capacity_rejects_context_beyond_the_model_window():
    """Llama-3-70B's window is 8,192 tokens; planning 34,816 is refused."""
    result = run("plan", "capacity", "--model", "Llama-3-70B", *NAPKIN_0_7)
    assert result.exit_code == 2
    assert "exceeds Llama-3-70B's window of 8,192 tokens" in result.stderr


def test_retention_json_reproduces_figure_10():
    """Seed 003 Figure 10: 16,384 tokens, 70B, 400 TFLOP/s, 50 GB/s: recompute 5.7344 s, T* 215 ms."""
    doc = run_json("plan", "retention", "--model", "Llama-3.1-70B", "--context", "16384", "--params-b", "70",
                   "--prefill-tflops", "400", "--link-gbps", "50")
    assert doc["recompute_seconds"] == pytest.approx(5.7344, rel=1e-12)
    assert doc["reload_seconds"] == pytest.approx(0.1073741824, rel=1e-12)
    assert doc["round_trip_seconds"] == pytest.approx(0.2147483648, rel=1e-12)
    assert doc["break_even_seconds"] == doc["round_trip_seconds"]


def test_retention_napkin_0_6_decision():
    """Napkin 0.6: TP=8 x 64 GB/s, 70.6B, 3,560 TFLOP/s: 21 ms reload, 62x, offload the 45 s wait."""
    doc = run_json("plan", "retention", "--bytes-per-token", "327680", "--context", "32768", "--tp", "8",
                   "--params-b", "70.6", "--prefill-tflops", "3560", "--link-gbps", "64",
                   "--tool", "integration-suite=45")
    assert round(doc["reload_seconds"] * 1e3) == 21
    assert round(doc["speedup_vs_recompute"]) == 62
    assert doc["decisions"][0]["decision"] == "offload"
    assert round(doc["decisions"][0]["hold_cost_byte_seconds"] / 1e9) == 483


def test_retention_rejects_a_malformed_tool():
    """--tool needs NAME=SECONDS: exit 2 with one line."""
    result = run("plan", "retention", "--bytes-per-token", "327680", "--context", "1024", "--params-b", "8",
                 "--prefill-tflops", "400", "--tool", "build=soon")
    assert result.exit_code == 2
    assert result.stderr.startswith("kvctl: error: --tool: expected NAME=TYPICAL_SECONDS")


def test_chunked_prefill_reproduces_napkin_0_5():
    """Seed 003 napkin 0.5: ITL 46.7 ms baseline, 1,194.7 ms monolithic, 158.7 ms chunked."""
    result = run("plan", "chunked-prefill", "--params-b", "70", "--weights-gb", "140", "--peak-tflops", "800",
                 "--hbm-tbps", "3", "--decode-batch", "32", "--prompt", "4096", "--chunk", "512")
    assert result.exit_code == 0, result.output
    for text in ("46.7 ms", "1,194.7 ms", "158.7 ms", "25.6x"):
        assert text in result.stdout


def test_block_size_shows_the_482_byte_ledger():
    """Seed 000 0x0D / 0x09B via the CLI: the P=16 row carries M_meta = 482 B."""
    doc = run_json("plan", "block-size", "--lengths", "33,25,16", "--row-bytes", "64KiB", "--pool-slots", "128",
                   "--kernel-lengths", "64,63,17,1")
    by_size = {row["block_size"]: row for row in doc["rows"]}
    assert by_size[16]["metadata"]["total_bytes"] == 482
    assert [k["padding_cells"] for k in doc["kernel_tables"]] == [26, 12, 5, 2, 0]


def test_cow_reproduces_0x05A():
    """Seed 000 0x05A via the CLI: two groups of 48 + 16 KiB, fork at 34: 320 KiB, 5x."""
    doc = run_json("plan", "cow", "--offset", "34", "--block-size", "16", "--row-bytes", "48KiB",
                   "--row-bytes", "16KiB")
    assert doc["traffic_bytes"] == 320 * 1024
    assert doc["traffic_amplification"] == 5


def test_cow_rejects_an_unreadable_size():
    """'64 furlongs' is not a size: exit 2."""
    result = run("plan", "cow", "--offset", "34", "--block-size", "16", "--row-bytes", "64 furlongs")
    assert result.exit_code == 2
    assert "cannot read '64 furlongs' as a size" in result.stderr


def test_vmm_reproduces_0x06F():
    """Seed 000 0x06F via the CLI: M_VA 2,304 B, physical pool 768 B, bundle 256 B."""
    doc = run_json("plan", "vmm", "--layers", "2", "--slots", "3", "--max-context", "12", "--kv-heads", "2",
                   "--head-dim", "4", "--kv-dtype", "fp16", "--page-group", "64", "--handles", "12")
    (ledger,) = doc["ledgers"]
    assert (ledger["virtual_reservation_bytes"], ledger["physical_pool_bytes"], ledger["page_bundle_bytes"]) == (
        2304, 768, 256)


def test_vmm_reproduces_0x0BJ_from_the_model():
    """Seed 000 0x0BJ: Llama-3-8B rows are 2,048 B; 1,025 tokens need 33 groups of 64 KiB."""
    doc = run_json("plan", "vmm", "--model", "Llama-3-8B", "--page-group", "64KiB,2MiB", "--lengths", "1024,1025")
    assert doc["tensor_row_bytes"] == 2048
    assert [[f["page_groups"] for f in g["frontiers"]] for g in doc["page_groups"]] == [[32, 33], [1, 2]]


def test_shared_prefix_batch_reproduces_0x0BI():
    """Seed 000 0x0BI via the CLI: 608 logical, 160 unique, 448 saved rows."""
    doc = run_json("plan", "shared-prefix", "--prefix", "64", "--suffixes", "8,8,8,8,16,16,16,16",
                   "--kv-row-bytes", "512", "--value-dim", "128")
    assert (doc["rows"]["logical_rows"], doc["rows"]["unique_rows"], doc["rows"]["saved_rows"]) == (608, 160, 448)


def test_shared_prefix_tree_reproduces_0x0BE():
    """Seed 000 0x0BE via the CLI: 19 / 10 / 9 rows and a 112 B partial buffer."""
    chunks = ["C0=2@0-4", "C1=1@0-2", "C2=2@2-4", "C3=2@0-1", "C4=1@1-2", "C5=1@2-3", "C6=1@3-4"]
    args = [x for c in chunks for x in ("--chunk", c)]
    doc = run_json("plan", "shared-prefix", "--kv-row-bytes", "10", "--value-dim", "3", *args)
    assert (doc["rows"]["logical_rows"], doc["rows"]["unique_rows"], doc["rows"]["saved_rows"]) == (19, 10, 9)
    assert doc["partial_bytes"] == 112


def test_recommend_prints_a_launch_line():
    """plan recommend ends with an SGLang launch command carrying every recommended flag."""
    doc = run_json("plan", "recommend", "--model", "Llama-3.1-70B", "--gpu", "H100", "--gpus", "8", "--tp", "8",
                   "--context", "32768", "--output", "2048", "--shared-tokens", "24576",
                   "--tool-wait-seconds", "45")
    for flag in ("--mem-fraction-static", "--page-size", "--radix-eviction-policy", "--max-running-requests",
                 "--chunked-prefill-size", "--enable-hierarchical-cache", "--hicache-size"):
        assert flag in doc["command"]
    assert doc["command"].startswith("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B --tp 8")


def test_recommend_without_a_tool_wait_leaves_hicache_off_and_says_so():
    """No --tool-wait-seconds: no HiCache flags are invented; the reason and the assumption say why."""
    result = run("plan", "recommend", "--model", "Llama-3.1-70B", "--gpus", "8", "--tp", "8",
                 "--context", "32768", "--output", "2048", "--shared-tokens", "24576")
    assert result.exit_code == 0, result.output
    assert "--hicache-size" not in result.stdout
    assert "give --tool-wait-seconds to size HiCache" in result.stdout
    assert "assumes: tool wait: unknown: HiCache left off (give --tool-wait-seconds)" in result.stdout


def test_addr_reproduces_0x03F():
    """Seed 000 0x03F via `kvctl addr`: slot 96, byte address 4,311,843,082."""
    doc = run_json("addr", MANIFEST, "--request", "A", "--token", "16", "--layer", "24", "--kind", "K",
                   "--head", "1", "--lane", "5")
    assert (doc["slot_id"], doc["byte_address"]) == (96, 4_311_843_082)


def test_addr_rejects_0x03G_token_25():
    """Seed 000 0x03G via `kvctl addr`: B's token 25 fails request visibility, exit 2, one line."""
    result = run("addr", MANIFEST, "--request", "B", "--token", "25", "--layer", "24")
    assert result.exit_code == 2
    assert result.stderr == ("kvctl: error: rejected at request visibility: token 25 is outside "
                             "request B's context [0, 25)\n")


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_recommend_rejects_a_tool_wait_that_is_not_a_positive_finite_number(value):
    """--tool-wait-seconds sizes HiCache by Little's law: NaN, inf, 0 and negatives are exit 2."""
    result = run("plan", "recommend", "--model", "Llama-3-8B", "--context", "4096", "--output", "256",
                 "--tool-wait-seconds", value)
    assert result.exit_code == 2
    expected = {"nan": "must be a finite number, got nan", "inf": "must be a finite number, got inf",
                "0": "must be a positive, finite number of seconds",
                "-5": "must not be negative, got -5"}[value]
    assert result.stderr.startswith("kvctl: error: --tool-wait-seconds ")
    assert expected in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("option", ["--hbm-gb", "--weights-gb", "--reserve-gb"])
@pytest.mark.parametrize("value", ["nan", "inf", "80 furlongs"])
def test_capacity_size_options_reject_non_sizes(option, value):
    """Every --*-gb option goes through one parser: NaN, inf and unknown units are exit 2."""
    result = run("plan", "capacity", "--bytes-per-token", "327680", "--params-b", "70", "--context", "1024",
                 "--output", "0", option, value)
    assert result.exit_code == 2
    assert result.stderr == (f"kvctl: error: {option}: cannot read '{value}' as a size "
                             "(e.g. 80 (GB), 80GiB, 512MiB)\n")

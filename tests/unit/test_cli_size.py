"""`kvctl size` through Typer's CliRunner: output, --json, and one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
# Seed 003 napkin math 0.1's own inputs: 141.2 GB of weights, 2.5 GB reserve, no headroom.
NAPKIN_0_1 = ["size", "--model", "Llama-3.1-70B", "--gpu", "H100-SXM", "--gpus", "8", "--tp", "8",
              "--weights-gb", "141.2", "--reserve-gb", "2.5", "--headroom", "0",
              "--context", "8192,32768,131072"]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_table_shows_the_napkin_0_1_concurrency():
    """The human table lists 195 / 48 / 12 trajectories for seed 003 napkin math 0.1."""
    result = run(*NAPKIN_0_1)
    assert result.exit_code == 0, result.output
    assert "Trajectories that fit" in result.stdout
    lines = {line.split()[1]: line for line in result.stdout.splitlines() if line.startswith("│")}
    assert lines["8,192"].split("│")[5].strip() == "195"
    assert lines["131,072"].split("│")[5].strip() == "12"


def test_json_document_carries_the_numbers():
    """--json: bytes per token, pool and per-context concurrency as plain JSON."""
    result = run(*NAPKIN_0_1, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["bytes_per_token_model"] == 327_680
    assert doc["bytes_per_token_per_rank"] == 40_960
    assert doc["pool_bytes_node"] == 525_994_767_360
    assert [row["max_trajectories"] for row in doc["contexts"]] == [195, 48, 12]
    assert doc["gpu"]["name"] == "H100-SXM"


def test_demo_command_with_the_long_context_preset():
    """The demo shape (8 x H100, TP=8, 8K/32K/128K) with napkin 0.1's 2.5 GB reserve and no
    headroom, counted weights: still 195 / 48 / 12."""
    result = run("size", "--model", "Llama-3.1-70B", "--gpu", "H100-SXM", "--gpus", "8",
                 "--tp", "8", "--reserve-gb", "2.5", "--headroom", "0",
                 "--context", "8192,32768,131072", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["contexts"]
    assert [row["max_trajectories"] for row in rows] == [195, 48, 12]


def test_defaults_are_plan_capacitys_defaults():
    """Defaults (4.5 GB reserve, 10% headroom, 80 GiB H100): per GPU 80 GiB - 17,638,426,624 B
    weights - 4.5e9 B = 63,760,919,296 B -> 1,556,663 tokens of 40,960 B; 90% = 1,400,996;
    // 32,768 = 42 trajectories at 32k, as `plan capacity --output 0` gives."""
    doc = json.loads(run("size", "--model", "Llama-3.1-70B", "--gpus", "8", "--tp", "8",
                         "--context", "32768", "--json").stdout)
    assert doc["budget"]["pool_bytes"] == 80 * 2**30 - 17_638_426_624 - 4_500_000_000
    assert [row["max_trajectories"] for row in doc["contexts"]] == [42]
    plan = json.loads(run("plan", "capacity", "--model", "Llama-3.1-70B", "--gpus", "8", "--tp", "8",
                          "--context", "32768", "--output", "0", "--json").stdout)
    assert plan["max_trajectories_unshared"] == 42
    assert plan["split"]["kv_pool_bytes"] == doc["budget"]["pool_bytes"]


def test_config_directory_and_k_suffix_contexts():
    """--model takes a directory with a config.json; contexts accept k = 1024."""
    result = run("size", "--model", str(CONFIGS / "deepseek-v2-lite"), "--context", "4k,32k",
                 "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [row["context"] for row in doc["contexts"]] == [4096, 32768]
    assert doc["bytes_per_token_model"] == 31_104


def test_hbm_gb_accepts_binary_units():
    """--hbm-gb 80GiB equals the H100 preset's capacity; plain numbers are decimal GB."""
    binary = json.loads(run("size", "-m", "Llama-3-8B", "--hbm-gb", "80GiB", "--json").stdout)
    decimal = json.loads(run("size", "-m", "Llama-3-8B", "--hbm-gb", "80", "--json").stdout)
    assert binary["budget"]["hbm_bytes"] == 85_899_345_920
    assert decimal["budget"]["hbm_bytes"] == 80_000_000_000


def test_kv_dtype_fp8_halves_the_row():
    """--kv-dtype fp8 stores one byte per element."""
    doc = json.loads(run("size", "-m", "Llama-3-8B", "--kv-dtype", "fp8", "--json").stdout)
    assert (doc["kv_dtype"], doc["bytes_per_token_model"]) == ("fp8", 65_536)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "Llama3-70"), "closest presets: Llama-3-70B"),
        (("--model", "Llama-3-70B", "--tp", "3"), "TP=3 does not divide Llama-3-70B's 64 query"),
        (("--model", "Qwen2.5-7B", "--tp", "7"), "TP=7 cannot replicate Qwen2.5-7B's 4 KV heads"),
        (("--model", "Llama-3-8B", "--hbm-gb", "0"), "--hbm-gb must be positive"),
        (("--model", "Llama-3-8B", "--weights-gb", "-3"), "--weights-gb: cannot read '-3' as a size"),
        (("--model", "Llama-3-8B", "--tp", "0"), "--tp must be positive, got 0"),
        (("--model", "Llama-3-8B", "--page-size", "0"), "--page-size must be positive"),
        (("--model", "Llama-3-8B", "--context", "8192,abc"), "--context 'abc'"),
        (("--model", "Llama-3-70B", "--context", "131072"), "preset Llama-3.1-70B has the same"),
        (("--model", "Llama-2-7B", "--context", "8192"), "window of 4,096 tokens"),
        (("--model", "Llama-3-8B", "--gpu", "H900"), "unknown GPU 'H900'"),
        (("--model", "Llama-3-8B", "--mem-fraction", "1.5"), "--mem-fraction must be in (0, 1]"),
        (("--model", "Llama-3-8B", "--mean-length", "0"), "--mean-length must be positive, got 0"),
        (("--model", "Llama-3-8B", "--mean-length", "9000"), "--mean-length 9,000 exceeds"),
        (("--model", "Llama-3-8B", "--batch", "-1"), "--batch must be positive"),
        (("--model", "Llama-3-8B", "--reserve-gb", "-1"), "--reserve-gb: cannot read '-1' as a size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    """Bad input: exit code 2, one 'kvctl: error:' line naming the problem, no traceback."""
    result = run("size", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("kvctl: error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.output


def test_malformed_config_is_one_line_and_exit_2(tmp_path):
    """A malformed config.json names the file and position; exit 2."""
    path = tmp_path / "config.json"
    path.write_text("{not json")
    result = run("size", "--model", str(path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"kvctl: error: --model: {path}: malformed JSON at line 1")
    assert result.stderr.count("\n") == 1


def test_unreadable_config_is_one_line_and_exit_2(tmp_path):
    """A config.json that does not exist cannot be read: exit 2, naming the file."""
    missing = tmp_path / "config.json"
    result = run("size", "--model", str(missing))
    assert result.exit_code == 2
    assert result.stderr == f"kvctl: error: --model: {missing}: cannot read (No such file or directory)\n"


def test_non_utf8_config_is_one_line_and_exit_2(tmp_path):
    """A binary file in place of config.json is exit 2, naming the file."""
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    result = run("size", "--model", str(path))
    assert result.exit_code == 2
    assert result.stderr == f"kvctl: error: --model: {path}: not a UTF-8 text file\n"


def test_help_lists_the_options():
    """--help documents the sizing options."""
    result = run("size", "--help")
    assert result.exit_code == 0
    for option in ("--model", "--gpu", "--hbm-gb", "--tp", "--pp", "--kv-dtype", "--mem-fraction",
                   "--context", "--page-size", "--batch", "--json"):
        assert option in result.stdout


def test_model_that_does_not_fit_still_shows_bytes_per_token_and_the_smallest_split():
    """Llama-3.1-405B on one H100: exit 0 (the question has an answer), the 516,096 B row and
    geometry, the verdict, and the smallest splits that fit (TP 1 x PP 11; TP 16 alone)."""
    result = run("size", "--model", "Llama-3.1-405B", "--context", "8192")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "504.00 KiB per GPU (516,096 B)" in out
    assert "126 layers, GQA 128 query / 8 KV heads" in out
    assert "Does not fit: weights (755.96 GiB/GPU)" in out
    assert "Smallest that fits: --tp 1 --pp 11 = 11 GPUs" in out
    assert "With tensor parallelism alone: --tp 16 = 16 GPUs" in out
    assert "Trajectories that fit" not in out


def test_model_that_does_not_fit_in_json():
    """--json carries fits false, the verdict and both suggestions."""
    doc = json.loads(run("size", "--model", "Llama-3.1-405B", "--context", "8192", "--json").stdout)
    assert doc["fits"] is False and doc["budget"] is None
    assert doc["bytes_per_token_per_rank"] == 516_096
    assert (doc["smallest_fit"]["tp"], doc["smallest_fit"]["pp"]) == (1, 11)
    assert (doc["smallest_fit_tp_only"]["tp"], doc["smallest_fit_tp_only"]["pp"]) == (16, 1)


def test_report_prints_its_assumptions():
    """Reserve, headroom, HBM, weights and units are printed, defaults marked as such."""
    out = run("size", "--model", "Llama-3-8B", "--reserve-gb", "2.5").stdout
    assert "reserve: 2.50 GB (2.33 GiB) per device (--reserve-gb)" in out
    assert "headroom: 10% of pool tokens kept free (default: seed 003 napkin 0.7)" in out
    assert "HBM: 80.00 GiB (85.90 GB) per device (default: preset H100-SXM)" in out
    assert "units: GiB = 2^30 B shown" in out


def test_json_carries_the_assumptions():
    """--json lists each assumption with its source."""
    doc = json.loads(run("size", "--model", "Llama-3-8B", "--headroom", "0.2", "--json").stdout)
    by_name = {a["name"]: a for a in doc["assumptions"]}
    assert by_name["headroom"]["source"] == "--headroom"
    assert by_name["reserve"]["source"] == "default: seed 003 napkin 0.7"


def test_help_lists_every_preset():
    """`size --help` names every model preset docs/size.md points to."""
    from kvctl.sizing.models import PRESETS

    result = run("size", "--help")
    text = " ".join(result.stdout.replace("│", " ").split())
    for name in PRESETS:
        assert name in text, name


def test_trajectories_count_whole_pages():
    """A page of 65,536 tokens: Llama-3.1-70B at TP 8 has 40,960 B per token per GPU, so the
    pool is 23 whole pages (1,507,328 tokens, as SGLang page-aligns it); 10% headroom leaves
    floor(1,507,328 x 0.9) = 1,356,595 tokens, and a 32k trajectory occupies a whole page:
    20 trajectories (not the 42 that 32,768-token rows would give)."""
    result = CliRunner().invoke(app, ["size", "--model", "Llama-3.1-70B", "--gpus", "8",
                                      "--tp", "8", "--context", "32768",
                                      "--page-size", "65536", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["pool_tokens_per_rank"], doc["pool_pages_per_rank"]) == (1_507_328, 23)
    row = doc["contexts"][0]
    assert (row["pages_per_trajectory"], row["max_trajectories"]) == (1, 20)

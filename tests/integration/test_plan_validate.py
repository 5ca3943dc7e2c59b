"""`kvctl plan recommend --validate-with-replay`: the recommendation replayed through SGLang's
real radix cache on CPU, beside the analytic estimate.

Two replays (module fixtures), bounded with --limit:

- PRESSED: Llama-3-8B on an H100-SXM cut to 24 GB HBM (1 GB runtime reserve) plans 7,300-token
  trajectories with a 1,200-token shared prefix; tree-of-thought forks 8 branches at once,
  so the replay reaches the recommended --max-running-requests cap (7).
- SPLIT: two GPUs at TP=1 (two replicas) and a 10 ms tool wait (HiCache off), replaying
  multi-tenant-chat for people (the Rich output).

The expected settings are the plan's own numbers, worked out in the test docstrings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
PRESSED = ("plan", "recommend", "--model", "Llama-3-8B", "--gpu", "H100-SXM", "--hbm-gb", "24",
           "--reserve-gb", "1", "--context", "7000", "--output", "300", "--shared-tokens", "1200",
           "--tool-wait-seconds", "45",
           "--validate-with-replay", str(SCENARIOS / "tree-of-thought.yaml"), "--limit", "4")
SPLIT = ("plan", "recommend", "--model", "Llama-3-8B", "--gpu", "H100-SXM", "--gpus", "2",
         "--context", "6000", "--output", "300", "--tool-wait-seconds", "0.01",
         "--validate-with-replay", str(SCENARIOS / "multi-tenant-chat.yaml"), "--limit", "2")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def pressed() -> dict:
    """The --json document of the PRESSED replay."""
    result = invoke(*PRESSED, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def split_text() -> str:
    """The human output of the SPLIT replay."""
    result = invoke(*SPLIT)
    assert result.exit_code == 0, result.output
    return result.stdout


def rows(doc: dict) -> dict[str, dict]:
    return {row["quantity"]: row for row in doc["validation"]["rows"]}


def test_replay_runs_with_the_recommended_flags(pressed):
    """Page 64, slru, max running 7, tau_high 0.88: the flags the recommendation printed."""
    settings = pressed["validation"]["settings"]
    assert (pressed["page_size"], pressed["max_running_requests"]) == (64, 7)
    assert "--radix-eviction-policy" in pressed["launch_args"]
    policy = pressed["launch_args"][pressed["launch_args"].index("--radix-eviction-policy") + 1]
    assert (settings["page_size"], settings["eviction_policy"], settings["max_running_requests"],
            settings["tau_high"]) == (64, policy, 7, 0.88)
    assert policy == "slru"


def test_replay_pool_is_sglangs_pool_per_replica_in_whole_pages(pressed):
    """pool = SGLang's pool per device under --mem-fraction-static 0.958, / 131,072 B per
    token, floored to pages of 64: 6,931,477,503 B -> 52,882 tokens -> 52,864."""
    per_device = pressed["capacity"]["bytes_per_token_per_device"]
    expected = pressed["sglang_pool_bytes_per_device"] // per_device // 64 * 64
    assert pressed["validation"]["settings"]["pool_tokens"] == expected == 52_864
    assert pressed["validation"]["report"]["settings"]["pool_tokens"] == 52_864


def test_token_budget_is_the_chunk_plus_the_decode_batch(pressed):
    """The engine's budget counts decodes: --chunked-prefill-size 1024 + 7 decodes = 1,031."""
    assert pressed["chunked_prefill_size"] == 1024
    assert pressed["validation"]["settings"]["token_budget"] == 1024 + 7


def test_host_tier_is_the_recommended_hicache_in_tokens(pressed):
    """HiCache on (45 s tool waits): host tier = --hicache-size bytes per device / m_token."""
    assert pressed["hicache_enabled"] is True
    per_device = pressed["capacity"]["bytes_per_token_per_device"]
    expected = pressed["hicache_host_bytes_per_device"] // per_device
    assert pressed["validation"]["settings"]["host_capacity_tokens"] == expected
    assert pressed["validation"]["target"]["host_capacity_tokens"] == expected


def test_hicache_advice_is_validated_by_sglangs_hicache(pressed):
    """HiCache on, no offload tool waits: the replay ran SGLang's HiCache with the recommended
    host tokens (SGLang's host pool keeps host // 64 + 1 pages of 64), says so (JSON and the
    "replayed with" line), and kvctl's own host-tier model stayed off."""
    validation = pressed["validation"]
    assert validation["hicache_validated_by"] == "sglang_hicache_replay"
    host = [line for line in validation["replayed_with"] if line.startswith("host tier")]
    assert host[0].endswith("HiCache advice validated by SGLang's HiCache (its host pool and "
                            "cache controller, replayed on CPU)")
    tokens = validation["target"]["host_capacity_tokens"]
    report = validation["report"]
    assert report["hicache"]["host_capacity_tokens"] == (tokens // 64 + 1) * 64
    assert report["settings"]["hicache"]["source"] == "sglang_hicache"
    assert report["offloaded_tokens"] == 0


def test_offload_tool_waits_keep_kvctls_model_for_hicache_advice():
    """A scenario whose tools offload (coding-agents) needs kvctl's host-tier model, which
    cannot run beside SGLang's HiCache: the advice is validated by the model, and says so."""
    args = list(PRESSED)
    args[args.index("--validate-with-replay") + 1] = str(SCENARIOS / "coding-agents.yaml")
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    validation = json.loads(result.stdout)["validation"]
    assert validation["hicache_validated_by"] == "kvctl_model"
    assert "hicache" not in validation["report"]
    host = [line for line in validation["replayed_with"] if line.startswith("host tier")]
    assert host[0].endswith("HiCache advice validated by kvctl's host-tier model "
                            "(engine_adapter/embedded/host_tier.py), not SGLang's HiCache "
                            "(the workload's offload tool waits need that model)")


def test_virtual_clock_prices_the_users_deployment_with_the_plans_mfu(pressed):
    """The replay's cost model is Llama-3-8B on H100-SXM x TP1, prefill MFU 0.6 (--prefill-mfu
    default), 131,072 B of K/V per token."""
    deployment = pressed["validation"]["report"]["deployment"]
    assert (deployment["model_name"], deployment["gpu"], deployment["tp"]) == (
        "Llama-3-8B", "H100-SXM", 1)
    assert (deployment["prefill_mfu"], deployment["kv_bytes_per_token"]) == (0.6, 131_072)


def test_forked_workload_reaches_the_max_running_cap_and_never_exceeds_it(pressed):
    """8-way forks offer more than 7 at once: the peak decode batch (every step sampled) is 7."""
    figures = pressed["validation"]["figures"]
    assert figures["timeline_every_s"] == 0.0
    assert figures["peak_decode_batch"] == 7
    row = rows(pressed)["requests running at once"]
    assert (row["analytic_value"], row["replayed_value"]) == (7, 7)
    assert row["why"].startswith("the --max-running-requests cap was reached")


def test_replayed_column_is_the_replay_reports_numbers(pressed):
    """Hit rate, U_KV peak, token_usage peak, ITL p99 and retractions are the report's own."""
    report, by_name = pressed["validation"]["report"], rows(pressed)
    assert report["integrity_ok"] is True
    assert by_name["prefix hit rate"]["replayed_value"] == report["hit_rate"]
    assert by_name["U_KV peak vs tau_high"]["replayed_value"] == report["peak_kv_utilization"]
    assert by_name["KV held by running requests"]["replayed_value"] == report["peak_token_usage"]
    itl_p99 = report["modeled_latency"]["itl_s"]["p99"]
    assert by_name["ITL at the recommended chunk"]["replayed_value"] == itl_p99
    assert by_name["retractions"]["replayed_value"] == report["retractions"]
    mean = (report["prompt_tokens"] + report["output_tokens"]) / report["requests"]
    assert by_name["tokens per request (M + K)"]["replayed_value"] == mean


def test_analytic_column_is_the_recommendations_numbers(pressed):
    """ITL = the mixed iteration, sigma = 1,200 / 7,000, held = (1,200 + 7 x 6,100) / 52,864."""
    by_name = rows(pressed)
    itl = by_name["ITL at the recommended chunk"]["analytic_value"]
    assert itl == pressed["mixed_iteration_seconds"]
    assert by_name["prefix hit rate"]["analytic_value"] == 1200 / 7000
    assert by_name["prefix hit rate"]["comparable"] is False
    assert by_name["KV held by running requests"]["analytic_value"] == (1200 + 7 * 6100) / 52_864
    assert by_name["tokens per request (M + K)"]["analytic_value"] == 7300


def test_human_output_has_the_mappings_and_the_side_by_side_table(split_text):
    """The launch line, then 'replayed with:' lines and the four-column table."""
    assert "why: launch: python -m sglang.launch_server" in split_text
    assert "replayed with: page size " in split_text
    for header in ("quantity", "analytic estimate", "replayed (modeled)", "why they differ"):
        assert header in split_text
    assert "note: not the same quantity: prefix hit rate" in split_text


def test_two_replicas_replay_one_server_with_its_max_running(split_text):
    """--gpus 2 --tp 1 is two replicas; --max-running-requests is per server, so the one
    replayed replica takes it unchanged. Worked out from the plan's inputs: each H100 replica
    holds 498,495 tokens of Llama-3-8B's 131,072 B/token (80 GiB - 16.06 GB of bf16 weights -
    4.5 GB reserve); the admission ceiling tau_high = 0.88 over both replicas admits
    floor(0.88 x 996,990 / 6,300) = 139 trajectories of 6,000 + 300 tokens; per server
    139 // 2 = 69."""
    line = next(l for l in split_text.splitlines() if l.startswith("replayed with: max running "))
    assert line == ("replayed with: max running 69 <- --max-running-requests 69 (per server; "
                    "2 replicas, one replayed)")


def test_hicache_off_gives_the_replay_no_host_tier(split_text):
    """A 10 ms tool wait is within the offload break-even: HiCache off, host tier 0 tokens."""
    assert "replayed with: host tier 0 tokens <- HiCache off" in split_text


def test_limit_without_a_replay_is_an_input_error():
    """--limit alone: exit 2 and one line naming --validate-with-replay."""
    result = invoke("plan", "recommend", "--model", "Llama-3-8B", "--gpu", "H100-SXM",
                    "--context", "4000", "--output", "200", "--limit", "3")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("kvctl: error: --limit bounds the replay of "
                                     "--validate-with-replay; give that too")


def test_missing_workload_is_an_input_error(tmp_path):
    """A scenario path that does not exist: exit 2, one line, no replay."""
    missing = tmp_path / "nope.yaml"
    result = invoke("plan", "recommend", "--model", "Llama-3-8B", "--gpu", "H100-SXM",
                    "--context", "4000", "--output", "200", "--validate-with-replay", str(missing))
    assert result.exit_code == 2
    assert result.stderr.strip() == f"kvctl: error: --validate-with-replay {missing}: no such file"

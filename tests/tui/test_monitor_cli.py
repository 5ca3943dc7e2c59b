"""`kvctl monitor` at the CLI edge: option checks (exit 2, one line), `--json` for one
snapshot without the UI, and the refusal to start the UI without a terminal."""

from __future__ import annotations

import json

import pytest
from tui_helpers import SCENARIOS
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.tui

runner = CliRunner()
LIFECYCLE = str(SCENARIOS / "lifecycle-check.yaml")


def invoke(*args):
    return runner.invoke(app, ["monitor", *args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", LIFECYCLE, "--url", "http://127.0.0.1:1"],
         "give at most one of --scenario FILE, --trace FILE, --url URL"),
        (["--refresh", "0"], "--refresh must be positive, got 0"),
        (["--pace", "-1"], "--pace must not be negative, got -1"),
        (["--pool-tokens", "0"], "--pool-tokens 0 must be > 0"),
        (["--kv-events", "tcp://127.0.0.1:5557"], "--kv-events only applies with --url"),
        (["--url", "ftp://host:1"], "--url 'ftp://host:1' is not an http(s)://HOST:PORT address"),
        (["--scenario", "no/such.yaml"], "--scenario no/such.yaml: no such file"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(args, message):
    """Bad options fail before any engine is built: exit 2 and one line naming the problem."""
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.output.strip() == f"kvctl: error: {message}"


def test_malformed_scenario_yaml_exit_2(tmp_path):
    """A scenario that is not YAML is refused with its file name, before the UI starts."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [\n")
    result = invoke("--scenario", str(bad))
    assert result.exit_code == 2
    assert result.output.startswith(f"kvctl: error: {bad}:")


def test_no_terminal_without_json_exit_2():
    """Without a terminal the UI cannot start; the error points to --json."""
    result = invoke("--scenario", LIFECYCLE)
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == "kvctl: error: kvctl monitor needs a terminal; use --json for one snapshot"
    )


TRACE_LINES = (
    '{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [1, 2]}',
    '{"timestamp": 10, "input_length": 1100, "output_length": 8, "hash_ids": [1, 2, 3]}',
)


def test_malformed_trace_exit_2(tmp_path):
    """A trace line that is not JSON is refused with file and line, before the UI starts."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE_LINES[0] + "\nnot json\n")
    result = invoke("--trace", str(trace))
    assert result.exit_code == 2
    assert result.output.startswith(f"kvctl: error: {trace}:2: not valid JSON")


def test_json_trace_runs_on_a_noop_pool(tmp_path):
    """--trace replays a Mooncake trace on the embedded engine with the 262,144-token NoOp
    pool (slots cost no memory), looping it as a live server sees new traffic.

    Whenever the snapshot is taken (the live run may have looped any number of times under
    any load), it is a reading of whole passes of this trace: each pass submits both
    requests at once (the second's arrival lies beyond the clock, MooncakeDriver._feed), so
    the submitted count is 2n, and the prompt tokens are n - 1 whole passes (600 + 1,100)
    plus the current pass's admitted part: nothing, the 600-token request, or both."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(TRACE_LINES) + "\n")
    result = invoke("--trace", str(trace), "--json", "--refresh", "0.3", "--pace", "0")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["source"] == "t.jsonl (trace)"
    ledger = document["snapshot"]["ledger"]
    assert ledger["pool_tokens"] == 262_144
    counters = document["snapshot"]["counters"]
    passes, odd = divmod(counters["requests_submitted"], 2)
    assert passes >= 1 and odd == 0, counters
    assert counters["prompt_tokens"] - 1700 * (passes - 1) in (0, 600, 1700), counters


def test_json_prints_one_embedded_snapshot():
    """--json runs the scenario briefly on the embedded engine and prints one snapshot whose
    pool ledger balances (seed 000 0x0CF: residual 0) for lifecycle-check's 3,072-token pool."""
    result = invoke("--scenario", LIFECYCLE, "--json", "--refresh", "0.3", "--pace", "0")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["source"] == "lifecycle-check.yaml (scenario, seed 11)"  # the file's seed
    assert document["read_only"] is False
    snapshot = document["snapshot"]
    assert snapshot["info"]["engine"] == "embedded"
    ledger = snapshot["ledger"]
    assert ledger["pool_tokens"] == 3072
    assert ledger["free_tokens"] + ledger["evictable_tokens"] + ledger["used_tokens"] == 3072

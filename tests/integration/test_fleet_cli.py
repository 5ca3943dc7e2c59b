"""`kvctl replay TRACE --replicas N --router POLICY` end to end: the --json document adds
up, the table prints, a sweep ranks its points, and bad input fails in one line with exit
2 before any engine is built."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HEAD = str(REPO / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def kvctl(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvctl", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def test_json_document_adds_up_per_replica():
    done = kvctl("replay", HEAD, "--limit", "40", "--replicas", "3", "--router", "round_robin",
                 "--pool-tokens", "60000", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    replicas = doc["replicas"]
    assert doc["replica_count"] == 3 and len(replicas) == 3
    fleet = doc["fleet"]
    assert fleet["requests"] + fleet["rejected"] == 40
    assert sum(r["requests"] for r in replicas) == fleet["requests"]
    assert sum(r["hit_tokens"] for r in replicas) == fleet["hit_tokens"]
    # round_robin over 3 healthy replicas: request i goes to i % 3 (14, 13, 13 routed)
    routed = [r["requests"] + r["rejected"] for r in replicas]
    assert routed == [14, 13, 13]
    assert doc["router"]["name"] == "round_robin"
    assert doc["imbalance"]["requests"] == pytest.approx(
        max(r["requests"] for r in replicas) / (fleet["requests"] / 3))


def test_table_and_sweep():
    table = kvctl("replay", HEAD, "--limit", "20", "--replicas", "2", "--router", "affinity",
                  "--pool-tokens", "60000", "--regret")
    assert table.returncode == 0, table.stderr
    assert "replica 1" in table.stdout and "routing regret" in table.stdout
    sweep = kvctl("replay", HEAD, "--limit", "20", "--pool-tokens", "60000", "--sweep",
                  "replicas=1,2", "--sweep", "router=round_robin,oracle", "--json")
    assert sweep.returncode == 0, sweep.stderr
    doc = json.loads(sweep.stdout)
    rows = doc["rows"]
    assert sorted((r["replicas"], r["router"]) for r in rows) == [
        (1, "oracle"), (1, "round_robin"), (2, "oracle"), (2, "round_robin")]
    rates = [r["hit_rate"] for r in rows]
    assert rates == sorted(rates, reverse=True)  # ranked by hit rate
    # one replica: the router has no choice, so both policies give the same hits
    one = {r["router"]: r["hit_rate"] for r in rows if r["replicas"] == 1}
    assert one["oracle"] == one["round_robin"]


@pytest.mark.parametrize("args, message", [
    (["--replicas", "0", "--router", "oracle"], "--replicas must be positive, got 0"),
    (["--replicas", "-1", "--router", "oracle"], "--replicas"),
    (["--replicas", "100000", "--router", "oracle"], "is more than 32"),
    (["--replicas", "2", "--router", "nearest"], "unknown router policy 'nearest'"),
    (["--replicas", "2", "--router", "cache_aware", "--cache-threshold", "1.5"],
     "--cache-threshold"),
    (["--replicas", "2", "--router", "cache_aware", "--balance-rel-threshold", "0.5"],
     "balance"),
    (["--replicas", "2", "--router", "round_robin", "--mu", "0.5"],
     "--mu does not apply to router round_robin"),
    (["--router", "oracle"], "needs --replicas"),
    (["--regret"], "go with --replicas"),
    (["--sweep", "replicas=0,2"], "outside 1..32"),
    (["--sweep", "replicas=nan"], "--sweep replicas: 'nan' is not an integer"),
    (["--replicas", "2", "--router", "cache_aware", "--cache-threshold", "nan"],
     "--cache-threshold must be a finite number"),
    (["--replicas", "2", "--router", "cache_aware", "--request-form", "garbage"],
     "--request-form must be one of text, input_ids, got 'garbage'"),
    (["--replicas", "2", "--router", "round_robin", "--request-form", "input_ids"],
     "--request-form does not apply to router round_robin"),
    (["--replicas", "2", "--router", "oracle", "--save-cost-model", "/tmp/c.json"],
     "--save-cost-model goes with --against URL"),
    (["--against", "http://127.0.0.1:9", "--router", "cache_aware", "--save-cost-model",
      "/proc/no/clock.json"], "--save-cost-model /proc/no/clock.json: folder /proc/no does "
                              "not exist"),
    (["--replicas", "2", "--router", "oracle", "--curve"], "--curve take"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    """In process (CliRunner): a bad value fails before any engine, so no subprocess is
    needed to show it; the exit code and the one line are the command's own."""
    result = CliRunner().invoke(app, ["replay", HEAD, "--limit", "5", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], lines


def test_a_scenario_is_refused_in_one_line():
    scenario = str(REPO / "examples" / "scenarios" / "coding-agents.yaml")
    done = kvctl("replay", scenario, "--replicas", "2", "--router", "round_robin", timeout=300)
    assert done.returncode == 2
    assert "a fleet replay takes a Mooncake trace" in done.stderr

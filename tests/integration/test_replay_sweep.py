"""`kvctl replay --sweep`: grids in worker processes, the ranked table, written reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine_adapter.embedded.config import EVICTION_POLICIES
from kvctl.cli.app import app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def run(*args: str):
    return CliRunner().invoke(app, ["replay", HEAD, "--limit", "8", *args])


def test_two_by_two_grid_in_two_processes_writes_every_report(tmp_path):
    """eviction x pool = 4 runs over 2 worker processes: 4 ranked rows, sweep.json, the
    hit-rate-vs-pool plot, and one folder per run with its own report."""
    out = tmp_path / "sweep"
    result = run("--sweep", "eviction=lru,lfu", "--sweep", "pool-tokens=40000,80000",
                 "--parallel", "2", "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["rank"] for r in doc["ranking"]] == [1, 2, 3, 4]
    assert sorted(r["label"] for r in doc["ranking"]) == [
        "eviction=lfu pool-tokens=40000", "eviction=lfu pool-tokens=80000",
        "eviction=lru pool-tokens=40000", "eviction=lru pool-tokens=80000"]
    rates = [r["hit_rate"] for r in doc["ranking"]]
    assert rates == sorted(rates, reverse=True)
    assert (out / "sweep.json").exists() and (out / "hit_rate_vs_pool.png").exists()
    report = json.loads((out / "eviction-lfu_pool-tokens-40000" / "report.json").read_text())
    assert (report["settings"]["eviction_policy"], report["settings"]["pool_tokens"]) == ("lfu", 40000)
    assert report["evictions"] > 0 and report["integrity_ok"]


def test_every_sglang_eviction_policy_can_be_swept():
    """All eight policies run on a 40,000-token pool that forces eviction, each clean."""
    result = run("--sweep", f"eviction={','.join(EVICTION_POLICIES)}", "--pool-tokens", "40000",
                 "--parallel", "2", "--json")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [r["settings"]["eviction_policy"] for r in runs] == list(EVICTION_POLICIES)
    assert all(r["evictions"] > 0 and r["integrity_ok"] and r["requests"] == 8 for r in runs)


def test_table_ranks_runs_for_people():
    """Without --json: one table with the hit rate, evictions, retractions and modeled p99 TTFT."""
    result = run("--sweep", "eviction=lru,mru", "--pool-tokens", "40000")
    assert result.exit_code == 0, result.output
    assert "sweep over head_500.jsonl (eviction), ranked by hit rate" in result.stdout
    assert "TTFT p99 is modeled" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert sorted(row[1] for row in rows) == ["lru", "mru"]
    assert all(row[2] == "40,000" for row in rows)


def test_bad_sweep_value_fails_before_any_run(tmp_path):
    """An unknown policy in the grid: exit 2 naming the run and the valid policies."""
    result = run("--sweep", "eviction=lru,nope", "--out", str(tmp_path / "never"))
    assert result.exit_code == 2
    assert "sweep run 'eviction=nope': unknown eviction policy 'nope'; valid:" in result.stderr
    assert not (tmp_path / "never").exists()

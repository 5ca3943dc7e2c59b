"""`kvctl replay` end to end through Typer's CliRunner on the real embedded engine.

Small slices of the shipped Mooncake trace keep each replay to a few seconds.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
HEAD = str(TRACES / "head_500.jsonl")
REQUIRED = ("requests", "prompt_tokens", "hit_tokens", "hit_rate", "evicted_tokens", "retractions",
            "peak_kv_utilization", "funnel", "integrity_ok")


def run(*args: str):
    return CliRunner().invoke(app, ["replay", *args])


def bad_trace(tmp_path: Path) -> Path:
    ok = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}\n'
    path = tmp_path / "bad.jsonl"
    path.write_text(ok + ok + '{"timestamp": 1, "input_length": 600, "output_length": 3, "hash_ids": [0, 1}\n')
    return path


def test_json_report_has_the_required_keys_and_a_clean_ledger():
    """--json on 12 requests: every required key, 12 requests, integrity ok, residual 0."""
    result = run(HEAD, "--limit", "12", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert all(key in doc for key in REQUIRED)
    assert doc["requests"] == 12 and doc["integrity_ok"] is True
    assert doc["integrity"]["pool_residual_tokens"] == 0
    assert doc["prompt_tokens"] == doc["funnel"]["lengths"]["S_prompt"]
    assert doc["modeled_latency"]["ttft_s"]["count"] == 12


def test_human_report_labels_latencies_as_modeled_and_prints_the_deployment():
    """The table names the deployment and says 'modeled' next to TTFT and ITL."""
    result = run(HEAD, "--limit", "6")
    assert result.exit_code == 0, result.output
    assert "deployment Llama-3-8B on H100-SXM x TP1 (modeled)" in result.stdout
    assert "modeled TTFT p50 / p99" in result.stdout and "modeled ITL p50 / p99" in result.stdout
    assert "integrity OK" in result.stdout


def test_out_writes_report_timeline_and_plots(tmp_path):
    """--out DIR: report.json (same document as --json), timeline.csv, two PNGs."""
    out = tmp_path / "run"
    result = run(HEAD, "--limit", "6", "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["hit_rate.png", "report.json", "timeline.csv",
                                                     "utilization.png"]
    written = json.loads((out / "report.json").read_text())
    printed = json.loads(result.stdout)
    written.pop("wall_clock"), printed.pop("wall_clock")
    assert written == printed
    rows = list(csv.DictReader((out / "timeline.csv").open()))
    assert rows[0]["step"] == "0" and int(rows[-1]["step"]) == printed["steps"]
    assert (out / "utilization.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_malformed_line_exits_2_names_file_and_line_and_writes_nothing(tmp_path):
    """Line 3 is broken: one error line naming '<file>:3', exit 2, no --out folder."""
    path = bad_trace(tmp_path)
    out = tmp_path / "never"
    result = run(str(path), "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"kvctl: error: {path}:3: not valid JSON")
    assert result.stderr.count("\n") == 1
    assert not out.exists()


def test_unknown_policy_lists_the_valid_ones(tmp_path):
    """--eviction lrx: exit 2 listing SGLang's eight policies, nothing written."""
    out = tmp_path / "never"
    result = run(HEAD, "--eviction", "lrx", "--out", str(out))
    assert result.exit_code == 2
    assert "is not one of lru, lfu, fifo, mru, filo, priority, slru, tlru" in result.stderr
    assert not out.exists()


def test_pool_smaller_than_a_request_rejects_it_and_exits_0(tmp_path):
    """A pool smaller than line 1's prompt: SGLang refuses that request (its
    max_req_input_len is 4,095 - 5 = 4,090), the replay lists it and exits 0."""
    result = run(HEAD, "--limit", "1", "--pool-tokens", "4096", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["requests"], doc["rejected"]["requests"]) == (0, 1)
    assert doc["rejected"]["list"][0]["reason"].endswith(
        "exceeds the maximum allowed length (4090 tokens). Use a shorter input or enable "
        "--allow-auto-truncate.")


def test_same_seed_same_report_byte_for_byte(tmp_path):
    """Two replays, seed 7: report.json identical once the wall_clock block is removed."""
    from kvctl.replay.report import deterministic_json

    texts = []
    for name in ("a", "b"):
        result = run(HEAD, "--limit", "20", "--seed", "7", "--pool-tokens", "150000",
                     "--json", "--out", str(tmp_path / name))
        assert result.exit_code == 0, result.output
        texts.append(deterministic_json(json.loads((tmp_path / name / "report.json").read_text())))
    assert texts[0] == texts[1]
    assert json.loads(texts[0])["evictions"] > 0  # a run that exercised eviction
    assert (tmp_path / "a" / "timeline.csv").read_text() == (tmp_path / "b" / "timeline.csv").read_text()


def test_scenario_replay_is_deterministic_for_a_seed():
    """A shipped scenario twice with --seed 3: identical JSON apart from wall_clock; the seed
    is reported."""
    from kvctl.replay.report import deterministic_json

    scenario = str(Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "coding-agents.yaml")
    docs = []
    for _ in range(2):
        result = run(scenario, "--limit", "2", "--seed", "3", "--json")
        assert result.exit_code == 0, result.output
        docs.append(json.loads(result.stdout))
    assert deterministic_json(docs[0]) == deterministic_json(docs[1])
    assert docs[0]["settings"]["seed"] == 3 and docs[0]["workload"]["kind"] == "scenario"

"""`kvctl replay TRACE --curve` through Typer's CliRunner: the --json document, the table,
curve.png under --out, --verify-points beside the curve, and one-line errors. The
document's figures are checked on the arrival-order pass (`--curve-order arrival`, no
replay); the default (one unbounded replay's event order) on the first 40 requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from kvctl.replay.curve.profile import BELOW_PEAK_MEASURED

pytestmark = pytest.mark.integration

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
HEAD = str(TRACES / "head_500.jsonl")
SCENARIO = str(Path(__file__).resolve().parents[2] / "examples" / "scenarios"
               / "multi-tenant-chat.yaml")


def run(*args: str):
    return CliRunner().invoke(app, ["replay", *args])


def test_json_has_a_log_spaced_curve_the_ceiling_and_the_assumption():
    """head_500 at page 16 in arrival order: >= 50 increasing pool sizes, hit rates rising
    to the ceiling (16.39%: 1,167,552 of 7,124,855 prompt tokens; an unbounded exact replay
    finds 512 fewer, a request admitted while the one sharing its block was in flight),
    compulsory + uncacheable + ceiling = 1 (nothing in flight without a schedule), and the
    LRU assumption stated."""
    result = run(HEAD, "--curve", "--curve-order", "arrival", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    sizes = [p["pool_tokens"] for p in doc["curve"]]
    rates = [p["hit_rate"] for p in doc["curve"]]
    assert len(sizes) >= 50 and sizes == sorted(set(sizes)) and rates == sorted(rates)
    assert doc["ceiling_hit_rate"] == 1_167_552 / 7_124_855 and rates[-1] == doc["ceiling_hit_rate"]
    shares = doc["ceiling_hit_rate"] + doc["compulsory_miss_share"] + doc["uncacheable_share"]
    assert shares == pytest.approx(1.0) and doc["concurrent_miss_share"] == 0.0
    assert doc["policy_assumption"] == "lru" and "LRU" in doc["assumption"]
    assert [r["label"] for r in doc["table"]][1:] == [
        "50% of ceiling", "80% of ceiling", "90% of ceiling", "95% of ceiling",
        "ceiling (unbounded)"]
    assert doc["verified"] == []


def test_each_ceiling_row_is_the_smallest_pool_that_reaches_its_share():
    """The 80% row reaches 80% of the ceiling and one page less does not."""
    doc = json.loads(run(HEAD, "--curve", "--curve-order", "arrival", "--json").stdout)
    row = next(r for r in doc["table"] if r["label"] == "80% of ceiling")
    from kvctl.replay.curve.profile import build_curve
    from kvctl.replay.curve.stream import mooncake_stream

    curve = build_curve(mooncake_stream(HEAD, page_size=16))
    assert curve.hit_rate(row["pool_tokens"]) >= 0.8 * doc["ceiling_hit_rate"]
    assert curve.hit_rate(row["pool_tokens"] - 16) < 0.8 * doc["ceiling_hit_rate"]


def test_table_and_plot_under_out(tmp_path):
    """People get the table with the assumption, which names the replay whose order the
    curve follows and the pool it holds from; --out holds report.json and curve.png."""
    out = tmp_path / "curve"
    result = run(HEAD, "--limit", "40", "--curve", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "ceiling (unbounded)" in result.stdout and "LRU" in result.stdout
    assert "event order of one replay" in result.stdout and "valid from" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["curve.png", "report.json"]
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "report.json").read_text())  # the range and the measured miss
    assert f"valid from {doc['schedule_valid_from_pool_tokens']:,} tokens" in doc["assumption"]
    assert BELOW_PEAK_MEASURED in doc["assumption"]


def test_verify_points_puts_exact_replays_beside_the_curve():
    """--verify-points 1 on the first 40 requests replays the default pool exactly and
    prints curve, exact and their difference."""
    result = run(HEAD, "--limit", "40", "--curve", "--verify-points", "1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (point,) = doc["verified"]
    assert point["pool_tokens"] == doc["pool_tokens"]
    assert point["error"] == point["curve_hit_rate"] - point["exact_hit_rate"]
    exact = json.loads(run(HEAD, "--limit", "40", "--pool-tokens", str(doc["pool_tokens"]),
                           "--json").stdout)
    assert point["exact_hit_rate"] == exact["hit_rate"]


@pytest.mark.parametrize(("args", "message"), [
    (("--verify-points", "2"), "--verify-points needs --curve"),
    (("--curve", "--sweep", "pool-tokens=1000000,2000000"), "drop --sweep"),
    (("--curve", "--verify-points", "-1"), "--verify-points must not be negative"),
    (("--curve", "--curve-order", "fifo"), "--curve-order 'fifo': expected replay or arrival"),
])
def test_bad_combinations_exit_2_with_one_line(args, message):
    """Each bad combination is refused before any work, naming the problem."""
    result = run(HEAD, *args)
    assert result.exit_code == 2 and message in result.output


def test_a_scenario_is_refused_with_the_alternative():
    """--curve reads Mooncake traces; a scenario gets exit 2 and the sweep to use instead."""
    result = run(SCENARIO, "--curve")
    assert result.exit_code == 2 and "--curve reads Mooncake traces" in result.output

"""`kvctl plan recommend --trace`'s logic: SLO parsing and the replica search, with a fake
evaluator (a dict of (router, n) -> metrics) so every expected answer is derived by hand.

The search (kvctl/fleet/recommend.py): per router, doubling n = 1, 2, 4, ... (max last)
until a run meets every SLO, then bisection between the last miss and the first meet.
"""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from kvctl.cli.validate import RULES
from kvctl.errors import InputError
from kvctl.fleet.recommend import Slo, parse_routers, parse_slo, parse_slos, search, \
    search_document
from kvctl.fleet.runner import MAX_REPLICAS

pytestmark = pytest.mark.unit

TTFT = Slo("ttft-p99", 2.0)


# ----- SLO parsing ------------------------------------------------------------------------


@pytest.mark.parametrize("text, key, target", [
    ("ttft-p99=2s", "ttft-p99", 2.0),
    ("ttft-p99=500ms", "ttft-p99", 0.5),
    ("ttft_p50=1.5", "ttft-p50", 1.5),  # a bare number is seconds; _ spells -
    ("e2e-p99 = 30 s", "e2e-p99", 30.0),
    ("E2E-P50=250ms", "e2e-p50", 0.25),
    ("hit-rate=40%", "hit-rate", 0.4),
    ("hit-rate=0.4", "hit-rate", 0.4),
    ("hit-rate=100%", "hit-rate", 1.0),
    ("ttft-p99=1e-1s", "ttft-p99", 0.1),
])
def test_slo_values_with_units(text, key, target):
    slo = parse_slo(text)
    assert (slo.key, slo.target) == (key, pytest.approx(target))


@pytest.mark.parametrize("text, words", [
    ("latency=2s", "unknown SLO 'latency'"),
    ("ttft-p99", "expected KEY=VALUE"),
    ("ttft-p99=", "expected a time"),
    ("ttft-p99=2 parsecs", "expected a time"),
    ("ttft-p99=2%", "expected a time"),
    ("hit-rate=2s", "expected a share"),
    ("hit-rate=140%", "at most 100%"),
    ("hit-rate=1.5", "at most 100%"),
    ("ttft-p99=0s", "positive"),
    ("ttft-p99=-2s", "positive"),
    ("hit-rate=0%", "positive"),
    ("hit-rate=-0.2", "positive"),
    ("ttft-p99=nan", "expected a time"),
    ("ttft-p99=1e999s", "positive finite"),
])
def test_bad_slos_are_one_line_input_errors(text, words):
    with pytest.raises(InputError, match=words):
        parse_slo(text)


def test_slos_need_one_and_each_key_once():
    with pytest.raises(InputError, match="at least one --slo"):
        parse_slos([])
    with pytest.raises(InputError, match="ttft-p99 given twice"):
        parse_slos(["ttft-p99=2s", "ttft-p99=3s"])
    assert [s.key for s in parse_slos(["ttft-p99=2s", "hit-rate=40%"])] == ["ttft-p99", "hit-rate"]


def test_routers_list():
    assert parse_routers("round_robin, cache_aware") == ("round_robin", "cache_aware")
    for bad, words in (("nope", "unknown router policy"), (",,", "comma list"),
                       ("round_robin,", "comma list"), ("random,random", "twice")):
        with pytest.raises(InputError, match=words):
            parse_routers(bad)


def test_met_is_a_ceiling_for_latency_and_a_floor_for_hit_rate():
    assert TTFT.met(2.0) and not TTFT.met(2.01) and not TTFT.met(None)
    floor = Slo("hit-rate", 0.4)
    assert floor.met(0.4) and not floor.met(0.39) and not floor.met(None)
    assert TTFT.distance(3.0) == 1.5 and floor.distance(0.2) == 2.0
    assert math.isinf(floor.distance(0.0))


def test_max_replicas_rule_is_the_runners_cap():
    rule = RULES["max_replicas"]
    assert (rule.low, rule.high) == (1, MAX_REPLICAS)


# ----- the search, with a fake evaluator ----------------------------------------------------


class Fake:
    """evaluate(router, n) from a table of ttft-p99 (and hit rate) per (router, n); records
    the calls so the runs the search made can be checked."""

    def __init__(self, ttft: dict[str, dict[int, float]], hit: dict | None = None):
        self.ttft, self.hit, self.calls = ttft, hit or {}, []

    def __call__(self, router: str, n: int) -> dict:
        self.calls.append((router, n))
        return {"ttft-p99": self.ttft[router][n],
                "hit-rate": self.hit.get(router, {}).get(n, 0.5)}


def _falling(start: float) -> dict[int, float]:
    """ttft-p99 = start / n on 1..8 (monotone: more replicas, lower latency)."""
    return {n: start / n for n in range(1, 9)}


def test_monotone_answer_by_doubling_then_bisection():
    """ttft = 10 / n, SLO 2 s: n >= 5. Runs: 1, 2, 4 miss (10, 5, 2.5), 8 meets (1.25);
    bisection 4..8: 6 meets (1.67), 5 meets (2.0); answer 5, and 4 (a run) missed."""
    fake = Fake({"rr": _falling(10.0)})
    result = search(["rr"], 8, [TTFT], fake)
    assert fake.calls == [("rr", 1), ("rr", 2), ("rr", 4), ("rr", 8), ("rr", 6), ("rr", 5)]
    answer = result.answers[0]
    assert answer.replicas == 5 and answer.below.replicas == 4
    assert not answer.below.meets and answer.below.metrics["ttft-p99"] == 2.5
    assert result.recommendation.router == "rr" and result.recommendation.replicas == 5


def test_one_replica_meets_at_once_and_has_no_n_minus_one():
    fake = Fake({"rr": _falling(1.0)})
    result = search(["rr"], 8, [TTFT], fake)
    assert fake.calls == [("rr", 1)]
    assert result.answers[0].replicas == 1 and result.answers[0].below is None


def test_max_replicas_is_tried_even_off_the_doubling():
    """max 6: doubling 1, 2, 4, then 6 (not 8); ttft 10 / n meets at 6 (1.67) and 5 (2.0)."""
    fake = Fake({"rr": _falling(10.0)})
    result = search(["rr"], 6, [TTFT], fake)
    assert fake.calls == [("rr", 1), ("rr", 2), ("rr", 4), ("rr", 6), ("rr", 5)]
    assert result.answers[0].replicas == 5


def test_every_slo_must_be_met():
    """ttft 10 / n meets from 5; hit rate >= 40% fails at 5 and 6 (0.3), holds from 7:
    runs 1, 2, 4 miss, 8 meets; bisection 6 misses (hit), 7 meets: answer 7, 6 misses hit."""
    hit = {"rr": {5: 0.3, 6: 0.3, 7: 0.45, 8: 0.45}}
    fake = Fake({"rr": _falling(10.0)}, hit)
    result = search(["rr"], 8, [TTFT, Slo("hit-rate", 0.4)], fake)
    assert fake.calls == [("rr", 1), ("rr", 2), ("rr", 4), ("rr", 8), ("rr", 6), ("rr", 7)]
    answer = result.answers[0]
    assert answer.replicas == 7
    assert [s.key for s in answer.below.missed(result.slos)] == ["hit-rate"]


def test_fewest_replicas_wins_then_hit_rate_then_ttft():
    """a: 10 / n -> 5.  b: 6 / n -> 3.  c: 6 / n -> 3 with a higher hit rate than b.
    d: 5.9 / n -> 3 with b's hit rate but a lower ttft-p99 than b. Fewest is 3 (b, c, d);
    c has the best hit rate: c. Without c: b and d tie on hit rate; d's ttft is lower."""
    ttft = {"a": _falling(10.0), "b": _falling(6.0), "c": _falling(6.0), "d": _falling(5.9)}
    hit = {"c": {n: 0.7 for n in range(1, 9)}}
    result = search(["a", "b", "c", "d"], 8, [TTFT], Fake(ttft, hit))
    assert [a.replicas for a in result.answers] == [5, 3, 3, 3]
    assert result.recommendation.router == "c"
    result = search(["a", "b", "d"], 8, [TTFT], Fake(ttft, hit))
    assert result.recommendation.router == "d"
    result = search(["b", "b2"], 8, [TTFT], Fake({"b": _falling(6.0), "b2": _falling(6.0)}))
    assert result.recommendation.router == "b"  # a full tie: --routers order


def test_nothing_meets_names_the_closest_run():
    """Neither meets within 8: slow's 40 / n is at best 5 s (2.5x the 2 s target), less's
    30 / n at best 3.75 s (1.875x) at n = 8: that run is the closest."""
    fake = Fake({"slow": _falling(40.0), "less": _falling(30.0)})
    result = search(["slow", "less"], 8, [TTFT], fake)
    assert result.recommendation is None
    assert [a.replicas for a in result.answers] == [None, None]
    assert (result.closest.router, result.closest.replicas) == ("less", 8)
    assert fake.calls == [("slow", 1), ("slow", 2), ("slow", 4), ("slow", 8),
                          ("less", 1), ("less", 2), ("less", 4), ("less", 8)]
    doc = search_document(result, header=None, routers=["slow", "less"])
    assert doc["recommendation"] is None
    assert doc["closest"]["router"] == "less" and doc["closest"]["missed"] == ["ttft-p99"]


def test_non_monotone_interval_is_not_found():
    """Only n = 3 meets (latency too high below, hit rate too low above): doubling runs
    1, 2, 4, 8, all misses, so the search answers none; it never claims 3 (not a run)."""
    ttft = {"rr": {n: (1.0 if n == 3 else 9.0) for n in range(1, 9)}}
    fake = Fake(ttft)
    result = search(["rr"], 8, [TTFT], fake)
    assert fake.calls == [("rr", 1), ("rr", 2), ("rr", 4), ("rr", 8)]
    assert result.recommendation is None and result.answers[0].replicas is None


def test_non_monotone_two_meets_answers_the_one_bisection_reaches():
    """Meets at 3 and 8 only: 1, 2, 4 miss, 8 meets; bisection 4..8: 6 misses, 7 misses;
    answer 8 (3 was never run), and n - 1 = 7 is a run that missed."""
    ttft = {"rr": {n: (1.0 if n in (3, 8) else 9.0) for n in range(1, 9)}}
    fake = Fake(ttft)
    result = search(["rr"], 8, [TTFT], fake)
    assert fake.calls == [("rr", 1), ("rr", 2), ("rr", 4), ("rr", 8), ("rr", 6), ("rr", 7)]
    assert result.answers[0].replicas == 8 and result.answers[0].below.replicas == 7


def test_no_served_requests_is_a_miss():
    fake = Fake({"rr": {1: None, 2: 1.0}})
    result = search(["rr"], 2, [TTFT], fake)
    assert result.answers[0].replicas == 2


# ----- the command's bad input: one line, exit 2, before any replay -----------------------

TRACE = "examples/traces/mooncake/head_500.jsonl"


@pytest.mark.parametrize("extra, words", [
    (["--slo", "latency=2s"], "--slo: unknown SLO"),
    (["--slo", "ttft-p99=fast"], "--slo: ttft-p99='fast'"),
    (["--slo", "ttft-p99=0"], "positive"),
    (["--slo", "ttft-p99=-1s"], "positive"),
    (["--slo", "ttft-p99=2s", "--max-replicas", "0"], "--max-replicas must be positive"),
    (["--slo", "ttft-p99=2s", "--max-replicas", "33"], "--max-replicas must be at most 32"),
    (["--slo", "ttft-p99=2s", "--routers", "round_robin,nope"], "unknown router policy"),
    (["--slo", "ttft-p99=2s", "--slo", "ttft-p99=3s"], "given twice"),
    ([], "at least one --slo"),
    (["--slo", "ttft-p99=2s", "--context", "4096"], "--context size SGLang's flags"),
])
def test_bad_fleet_input_fails_before_any_replay(extra, words, monkeypatch):
    import kvctl.fleet.runner as runner

    def boom(*a, **k):
        raise AssertionError("a replay ran")

    monkeypatch.setattr(runner, "run_fleet", boom)
    result = CliRunner().invoke(app, ["plan", "recommend", "--trace", TRACE, *extra])
    assert result.exit_code == 2, (result.stderr, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: ") and words in lines[0], lines


def test_flag_mode_needs_its_options_or_a_trace():
    result = CliRunner().invoke(app, ["plan", "recommend", "--model", "Llama-3-8B"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("kvctl: error: give --model, --context and --output "
                                     "(SGLang flags for one server), or --trace and --slo "
                                     "(the fewest replicas meeting an SLO)")
    result = CliRunner().invoke(app, ["plan", "recommend", "--model", "Llama-3-8B",
                                      "--context", "4096", "--output", "512", "--slo",
                                      "ttft-p99=2s"])
    assert result.exit_code == 2 and "--slo go with --trace" in result.stderr


# ----- the human output -------------------------------------------------------------------


def _text(result, routers) -> str:
    from rich.console import Console

    from kvctl.cli.plan_fleet import render

    doc = search_document(result, header={"workload": {"name": "t.jsonl"},
                                          "replica": {"pool_tokens": 20_000,
                                                      "clock": "modeled"}}, routers=routers)
    console = Console(width=250, record=True, file=open("/dev/null", "w"))
    console.print(render(result, doc))
    return console.export_text()


def test_output_names_the_answer_what_n_minus_one_missed_and_the_validation():
    """rr: 10 / n -> 5 (4 misses at 2.50 s); the table lists the six runs in order."""
    text = _text(search(["rr"], 8, [TTFT], Fake({"rr": _falling(10.0)})), ["rr"])
    assert "recommendation: 5 replicas behind rr (ttft-p99 2.00 s)" in text
    assert "rr: 5 replicas; 4 replicas misses: ttft-p99 2.50 s > 2.00 s" in text
    assert "validated by the fleet replay: 6 runs" in text
    assert "clock modeled (roofline virtual clock)" in text
    assert text.count("missed ttft-p99") == 3  # runs 1, 2, 4; then 8, 6, 5 met
    assert "hit-rate" in text  # a tie-break, shown though not an SLO
    assert [line.split()[:3] for line in text.splitlines() if line.strip()[:1].isdigit()] == [
        ["1", "rr", "1"], ["2", "rr", "2"], ["3", "rr", "4"], ["4", "rr", "8"],
        ["5", "rr", "6"], ["6", "rr", "5"]]


def test_output_says_how_a_tie_on_replicas_was_broken():
    """b and c both need 3 (6 / n); c's hit rate 70% beats b's 50%."""
    ttft = {"b": _falling(6.0), "c": _falling(6.0)}
    text = _text(search(["b", "c"], 8, [TTFT], Fake(ttft, {"c": {n: 0.7 for n in range(1, 9)}})),
                 ["b", "c"])
    assert "recommendation: 3 replicas behind c" in text
    assert ("tie on 3 replicas, broken by hit rate then ttft-p99: c hit rate 70.00%, "
            "ttft-p99 2.00 s; b hit rate 50.00%, ttft-p99 2.00 s") in text


def test_output_when_nothing_meets_names_the_closest():
    fake = Fake({"slow": _falling(40.0), "less": _falling(30.0)})
    text = _text(search(["slow", "less"], 8, [TTFT], fake), ["slow", "less"])
    assert "recommendation: none; no router met the SLO within 8 replicas" in text
    assert "closest: less x8 (missed ttft-p99 3.75 s > 2.00 s)" in text

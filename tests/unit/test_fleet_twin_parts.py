"""The fleet twin's pure parts: matching replicas to workers, and refusing a fleet whose
workers differ in a setting the replay takes."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.twin.fleet_twin import _common_settings, best_mapping
from kvctl.twin.server_probe import ServerProfile

pytestmark = pytest.mark.unit


def test_best_mapping_follows_the_requests():
    """Replay replica 0's requests went to worker 1 (5 of 6), replica 1's to worker 0 (4 of
    5): the swap agrees on 9 pairs, the identity on 2."""
    pairs = [(0, 1)] * 5 + [(0, 0)] + [(1, 0)] * 4 + [(1, 1)]
    assert best_mapping(pairs, 2) == (1, 0)


def test_best_mapping_keeps_the_identity_on_a_tie_and_with_no_pairs():
    assert best_mapping([(0, 0), (0, 1), (1, 1), (1, 0)], 2) == (0, 1)
    assert best_mapping([], 3) == (0, 1, 2)


def test_best_mapping_greedy_above_eight_replicas_is_a_permutation():
    n = 10
    pairs = [(j, (j + 3) % n) for j in range(n) for _ in range(3)]
    mapping = best_mapping(pairs, n)
    assert sorted(mapping) == list(range(n))
    assert mapping == tuple((j + 3) % n for j in range(n))


def profile(url: str, **info) -> ServerProfile:
    base = {"page_size": 16, "max_total_num_tokens": 16384, "radix_eviction_policy": "lru",
            "max_running_requests": 8, "schedule_policy": "fcfs"}
    return ServerProfile(url=url, info={**base, **info}, vocab_size=512, vocab_source="test")


def test_workers_must_share_the_replayed_settings():
    same = _common_settings([profile("http://a:1"), profile("http://b:2")])
    assert same["page_size"] == 16 and same["pool_tokens"] == 16384
    with pytest.raises(InputError, match="workers differ in pool_tokens: http://a:1 has 16384, "
                                         "http://b:2 has 8192"):
        _common_settings([profile("http://a:1"), profile("http://b:2",
                                                          max_total_num_tokens=8192)])


def test_the_router_key_is_what_the_drive_sends():
    """The replay keys cache_aware with the ids the fleet twin's drive puts in the request
    (BlockVocabulary.prompt, rendered one character per id), block for block and cut at
    the line's length; equal hash ids give equal keys, different ones differ."""
    from kvctl.fleet.keys import RouterKeys
    from kvctl.twin.prompts import BlockVocabulary

    keys, sent = RouterKeys(512, 64, seed=3), BlockVocabulary(512, 64, seed=3)
    key = keys.key((4, 9, 11), 150)
    assert key.dtype.kind == "i" and len(key) == 150
    assert key.tolist() == sent.prompt((4, 9, 11), 150)
    assert keys.key((4, 9), 128)[:64].tolist() == key[:64].tolist()
    assert keys.key((5,), 64).tolist() != key[:64].tolist()
    assert keys.key((), 0).size == 0


def test_the_fleet_judges_ttft_on_the_held_out_requests_and_hits_on_all():
    """Two requests on two workers, request 2 held out: the TTFT ratios are request 2's
    alone (2.0 predicted / 4.0 measured = x0.5), the hit figures both requests', and the
    document says what was judged."""
    from types import SimpleNamespace

    from kvctl.replay.engine_setup import Deployment
    from kvctl.twin.clock import TwinClock
    from kvctl.twin.drive import DriveResult, Measured
    from kvctl.twin.fleet_twin import _document
    from kvctl.twin.holdout import Judged

    measured = DriveResult(requests=(
        Measured(line=1, prompt_tokens=100, sent_s=0.0, cached_tokens=0, ttft_s=1.0,
                 e2e_s=2.0, finished_s=2.0, rid="r1"),
        Measured(line=2, prompt_tokens=100, sent_s=1.0, cached_tokens=50, ttft_s=4.0,
                 e2e_s=5.0, finished_s=6.0, rid="r2")),
        evicted_tokens=0, ttft_source="server first_token_latency", wall_s=6.0)
    outcomes = [SimpleNamespace(rid="mc-1", rejected=None, replica=0, hit_tokens=0,
                                prompt_tokens=100, ttft_s=1.0, e2e_s=2.0),
                SimpleNamespace(rid="mc-2", rejected=None, replica=1, hit_tokens=50,
                                prompt_tokens=100, ttft_s=2.0, e2e_s=3.0)]
    judged = Judged(lines=frozenset({2}), on="held-out requests 2-2 of 2", out_of_sample=True)
    doc = _document("t.jsonl", "http://router", [SimpleNamespace(url="http://w0"),
                                                 SimpleNamespace(url="http://w1")],
                    measured, {1: 0, 2: 1},
                    (SimpleNamespace(outcomes=outcomes), {"mc-1": 1, "mc-2": 2}),
                    TwinClock(source="roofline", why="test"), 1.0, "round_robin", {}, "text",
                    Deployment(), None, 0, judged)
    agreement = doc["agreement"]
    assert (agreement["ttft_p50_ratio"], agreement["ttft_p99_ratio"]) == (0.5, 0.5)
    assert agreement["judged"]["requests"] == 1
    assert agreement["judged"]["measured"]["e2e_p50_s"] == 5.0
    assert agreement["hit_tokens_equal_share"] == 1.0 and agreement["requests_compared"] == 2
    assert agreement["hit_rate_points"] == 0.0
    assert agreement["ttft_judged_on"] == "held-out requests 2-2 of 2"
    assert doc["fleet"]["measured"]["ttft_p50_s"] == 2.5  # the table's columns: all requests
    from rich.console import Console

    from kvctl.cli.twin import render_fleet_twin

    console = Console(width=200, record=True)
    console.print(render_fleet_twin(doc))
    assert "TTFT on held-out requests 2-2, out of sample: p50 x0.50, p99 x0.50" in (
        console.export_text())

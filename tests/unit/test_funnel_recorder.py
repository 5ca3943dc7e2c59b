"""FunnelRecorder: one admission at a time into the monotone funnel (seed 000 0x0CF)."""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.instrument.funnel_recorder import AdmissionFacts, FunnelRecorder

pytestmark = pytest.mark.unit

HIT = AdmissionFacts(s_prompt=64, s_cap=63, authorized=True, s_any=48, s_ns=48, s_sem=48,
                     s_indexed=48, leased=True, mapped=True, snapshot_current=True, s_runtime=48)


def _facts(**changes) -> AdmissionFacts:
    return dataclasses.replace(HIT, **changes)


def _seed_recorder() -> FunnelRecorder:
    """The seed's 12 requests: 1 unauthorized, 2 index misses, 2 incompatible, 1 stale
    generation, 1 mapping lag, 1 stale snapshot, 4 executed hits."""
    recorder = FunnelRecorder()
    cases = ([_facts(authorized=False, s_any=0, s_ns=0, s_sem=0, s_indexed=0, s_runtime=0)]
             + [_facts(s_any=0, s_ns=0, s_sem=0, s_indexed=0, s_runtime=0)] * 2
             + [_facts(s_ns=0, s_sem=0, s_indexed=0, s_runtime=0)] * 2
             + [_facts(s_sem=0, s_indexed=0, s_runtime=0)]
             + [_facts(mapped=False, s_runtime=0)]
             + [_facts(snapshot_current=False, s_runtime=0)]
             + [HIT] * 4)
    for facts in cases:
        recorder.record(facts)
    return recorder


def test_seed_000_0x0cf_funnel_counts():
    """12 requests -> 11 authorized -> 9 candidates -> 7 compatible -> 6 current generation
    -> 6 leased -> 5 mapped -> 4 current snapshots -> 4 executed hits."""
    funnel = _seed_recorder().freeze()
    assert [s.requests for s in funnel.stages] == [12, 11, 9, 7, 6, 6, 5, 4, 4]
    assert {b.reason: b.requests for b in funnel.rejections} == {
        "unauthorized_namespace": 1, "index_miss": 2, "incompatible_namespace": 2,
        "stale_generation": 1, "evicted": 0, "mapping_lag": 1, "stale_snapshot": 1, "not_executed": 0,
    }
    assert funnel.is_monotone()


def test_seed_funnel_tokens_follow_the_carried_prefix():
    """Tokens: 12 x S_cap 63 enter; survivors carry min(S_cap, S_any) = 48 from candidates on."""
    funnel = _seed_recorder().freeze()
    assert [s.tokens for s in funnel.stages] == [756, 693, 432, 336, 288, 288, 240, 192, 192]
    buckets = {b.reason: b.tokens for b in funnel.rejections}
    assert buckets["unauthorized_namespace"] == 63
    assert buckets["index_miss"] == 2 * 63 + 9 * (63 - 48)


def test_hit_rate_of_the_seed_funnel():
    """4 hits of 48 over 12 prompts of 64: H_prefix = 192 / 768 = 0.25."""
    funnel = _seed_recorder().freeze()
    assert funnel.lengths.prompt == 768 and funnel.lengths.runtime == 192
    assert funnel.hit_rate == 0.25
    assert _seed_recorder().prompt_tokens == 768 and _seed_recorder().hit_tokens == 192


def test_evicted_request_lands_in_the_evicted_bucket():
    """Computed before under the same key (S_sem 48) but nothing resident: bucket evicted."""
    recorder = FunnelRecorder()
    recorder.record(_facts(s_indexed=0, s_runtime=0))
    buckets = {b.reason: (b.requests, b.tokens) for b in recorder.freeze().rejections}
    assert buckets["evicted"] == (1, 48)


def test_hit_shorter_than_indexed_loses_tokens_not_requests():
    """Indexed 48 but only 32 executed: the request reaches executed_hits, 16 tokens drop
    into not_executed."""
    recorder = FunnelRecorder()
    recorder.record(_facts(s_runtime=32))
    funnel = recorder.freeze()
    assert funnel.stage("executed_hits").requests == 1
    assert {b.reason: (b.requests, b.tokens) for b in funnel.rejections}["not_executed"] == (0, 16)
    assert funnel.is_monotone()


def test_lengths_are_summed_per_request():
    """The four lengths of seed 000 0x07A are sums over recorded requests."""
    recorder = FunnelRecorder()
    recorder.record(HIT)
    recorder.record(_facts(s_prompt=48, s_cap=47, s_sem=32, s_indexed=32, s_runtime=32))
    lengths = recorder.freeze().lengths
    assert (lengths.prompt, lengths.cap, lengths.semantic, lengths.indexed, lengths.runtime) == \
        (112, 110, 80, 80, 80)

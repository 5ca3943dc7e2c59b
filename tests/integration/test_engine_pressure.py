"""Memory pressure on the embedded engine: eviction, retraction, the admission ceiling,
and the scheduler's stall handling, on small pools of SGLang's real allocator."""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec

pytestmark = pytest.mark.integration


def _drain(engine) -> dict:
    records = {}
    while engine.has_work():
        records.update({r.rid: r for r in engine.step().finished})
        engine.check_integrity()
    return records


def test_retraction_under_decode_pressure_and_the_request_still_finishes(make_engine):
    """SGLang's PrefillAdder reserves each running request's remaining outputs, clipped at
    CLIP_MAX_NEW_TOKENS = 4,096: three 16-token prompts asking 6,000 outputs each reserve
    3 x (16 + 4,096 + 16) = 12,384 < 16,384 tokens and are admitted together, then outgrow
    the pool while decoding (3 x 6,016 > 16,384): retract_decode preempts, and every
    request still finishes with all 6,000 output tokens."""
    engine = make_engine(pool_tokens=16_384, tau_high=None, token_budget=512, max_running_requests=8,
                         max_context_len=8_192)
    for i in range(3):
        engine.submit(RequestSpec(rid=f"r{i}", tokens=np.arange(1_000 * (i + 1), 1_000 * (i + 1) + 16),
                                  max_new_tokens=6_000))
    records = {}
    while engine.has_work():
        records.update({r.rid: r for r in engine.step().finished})
    engine.check_integrity()
    snap = engine.snapshot()
    assert snap.counters.retractions >= 1 and snap.counters.retracted_tokens > 0
    assert sorted(records) == ["r0", "r1", "r2"]
    assert all(len(r.output_ids) == 6_000 for r in records.values())


def test_eviction_reclaims_unlocked_cache_when_the_pool_is_full(make_engine):
    """Eight distinct 200-token requests through a 512-token pool: SGLang evicts cached
    prefixes on allocation; every eviction is counted and the ledger balances throughout."""
    engine = make_engine(pool_tokens=512, tau_high=None)
    for i in range(8):
        engine.submit(RequestSpec(rid=f"r{i}", tokens=np.arange(10_000 * (i + 1), 10_000 * (i + 1) + 200),
                                  max_new_tokens=4, arrival_s=0.01 * i))
    assert len(_drain(engine)) == 8
    snap = engine.snapshot()
    assert snap.counters.evictions > 0 and snap.counters.evicted_tokens > 0
    assert snap.ledger.free_tokens + snap.ledger.evictable_tokens == 512


def test_admission_ceiling_defers_new_prefills(make_engine):
    """tau_high=0.5 on a 1,024-token pool: two 200+8-token requests (416 slots, U 0.41) run,
    a third (624 slots, 0.61) is deferred until they finish; deferrals are counted."""
    engine = make_engine(pool_tokens=1024, tau_high=0.5)
    for i in range(4):
        engine.submit(RequestSpec(rid=f"r{i}", tokens=np.arange(1_000 * (i + 1), 1_000 * (i + 1) + 200),
                                  max_new_tokens=8))
    most_running = 0
    while engine.has_work():
        engine.step()
        snap = engine.check_integrity()
        most_running = max(most_running, sum(r.state == "running" for r in snap.requests))
    assert most_running == 2
    assert snap.counters.admission_deferrals > 0 and snap.counters.requests_finished == 4


def test_decode_and_a_chunked_prefill_that_cannot_both_fit_still_finish(make_engine):
    """A decoding request (182 + 160 tokens) and a later 243-token prompt chunked at 64
    tokens per step cannot both be resident in 512 tokens. The engine must resolve it (by
    preempting one) without raising and without truncating the decoder's output."""
    engine = make_engine(pool_tokens=512, token_budget=64, tau_high=None, max_context_len=1024)
    engine.submit(RequestSpec(rid="decoder", tokens=np.arange(1, 183), max_new_tokens=160))
    engine.submit(RequestSpec(rid="chunked", tokens=np.arange(10_000, 10_243), max_new_tokens=1,
                              arrival_s=0.6))
    records = _drain(engine)
    assert sorted(records) == ["chunked", "decoder"]
    assert len(records["decoder"].output_ids) == 160


def test_request_larger_than_the_pool_is_refused_as_sglang_refuses_it(make_engine):
    """A request that could never fit (590 prompt tokens, 512-token pool: SGLang's
    max_req_input_len is 511 - 5 = 506) is refused on arrival with SGLang's message, not raised."""
    engine = make_engine(pool_tokens=512)
    engine.submit(RequestSpec(rid="huge", tokens=np.arange(1, 591), max_new_tokens=10))
    records = _drain(engine)
    assert records["huge"].rejected == ("Input length (590 tokens) exceeds the maximum allowed "
                                        "length (506 tokens). Use a shorter input or enable "
                                        "--allow-auto-truncate.")
    assert [r.rid for r in engine.rejections()] == ["huge"]


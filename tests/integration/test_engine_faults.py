"""Every integrity check of the embedded engine can fail: test-only fault injection.

    leak        pages taken from SGLang's allocator and given to nobody -> ledger residual
    lock-leak   a lock on a cached node that no request or lease holds -> delta_ref != 0
    alloc-fail  the next K/V allocation fails -> the admission rolls back, digest unchanged
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec
from kvctl.errors import InputError, IntegrityError

pytestmark = pytest.mark.integration


def _warm(engine) -> None:
    """One finished request: 192 tokens cached, evictable."""
    engine.submit(RequestSpec(rid="warm", tokens=np.arange(1, 201), max_new_tokens=4))
    engine.run_until_idle()
    engine.check_integrity()


def test_leak_is_reported_as_a_pool_ledger_residual(make_engine):
    """A leaked page (16 slots) makes the ledger residual 16, named with every term."""
    engine = make_engine(page_size=16)
    _warm(engine)
    assert engine.faults.inject("leak")
    with pytest.raises(IntegrityError) as caught:
        engine.check_integrity()
    message = str(caught.value)
    assert "pool ledger residual 16 tokens" in message
    assert "pool 2048 != free 1840 + evictable 192 + protected 0 + private 0" in message
    assert engine.snapshot().ledger.residual_tokens == 16


def test_lock_leak_is_reported_as_delta_ref_at_the_node(make_engine):
    """An unexplained lock on the cached 192-token node: recorded lock_ref 1, derived 0,
    delta_ref +1 at that node, and 192 protected tokens no lease explains."""
    engine = make_engine()
    _warm(engine)
    engine.submit(RequestSpec(rid="holder", tokens=np.arange(1, 201), max_new_tokens=30,
                              arrival_s=engine.clock_s))
    engine.step()  # a live request whose prompt is cached: the fault locks its match
    assert engine.faults.inject("lock-leak")
    snap = engine.snapshot(per_node_refs=True)
    (off,) = snap.refs.off_nodes
    assert (off.recorded, off.derived, off.delta, off.tokens) == (2, 1, 1, 192)
    assert off.requests == ("holder",)
    with pytest.raises(IntegrityError, match=rf"delta_ref \+1 at node {off.node_id} "
                                             r"\(recorded 2, derived 1; holder\)"):
        engine.check_integrity()


def test_lock_leak_needs_a_live_request_to_aim_at(make_engine):
    """On an idle engine (nothing tracked) the fault reports that it could not inject."""
    engine = make_engine()
    _warm(engine)
    assert not engine.faults.inject("lock-leak")
    assert engine.faults.injected == []
    engine.check_integrity()


def test_alloc_fail_rolls_the_admission_back_with_the_digest_unchanged(make_engine):
    """While another request decodes, a failed allocation leaves queues, locks, rows and
    free+evictable exactly as before the admission; the request is admitted on a later
    step, reuses the cached 192 tokens and finishes."""
    engine = make_engine()
    _warm(engine)
    engine.submit(RequestSpec(rid="busy", tokens=np.arange(5_000, 5_100), max_new_tokens=20,
                              arrival_s=engine.clock_s))
    engine.step()
    engine.submit(RequestSpec(rid="victim", tokens=np.arange(1, 261), max_new_tokens=3,
                              arrival_s=engine.clock_s))
    assert engine.faults.inject("alloc-fail")
    report = engine.step()
    assert report.prefill_tokens == 0
    digest_before, digest_after = engine.last_rollback()
    assert digest_before == digest_after
    engine.check_integrity()
    assert engine.snapshot().counters.allocation_failures == 1
    records = {r.rid: r for r in engine.run_until_idle()}
    assert (records["victim"].hit_tokens, len(records["victim"].output_ids)) == (192, 3)


def test_alloc_fail_on_an_otherwise_idle_engine_is_retried(make_engine):
    """A failed allocation when nothing else runs is rolled back and retried on the next
    step; it is not a scheduler stall (the rolled-back state is valid and fits)."""
    engine = make_engine()
    _warm(engine)
    engine.submit(RequestSpec(rid="victim", tokens=np.arange(1, 261), max_new_tokens=3,
                              arrival_s=engine.clock_s))
    assert engine.faults.inject("alloc-fail")
    (record,) = engine.run_until_idle()
    assert (record.rid, record.hit_tokens) == ("victim", 192)


def test_a_runtime_error_that_is_not_out_of_memory_propagates(make_engine):
    """Only SGLang's out-of-memory error means "the pool is short". Any other RuntimeError
    from the allocation (SGLang's real allocator, its alloc_extend made to raise what a
    device fault would) leaves step(): no rollback, no allocation failure counted."""
    engine = make_engine()
    _warm(engine)
    engine.submit(RequestSpec(rid="victim", tokens=np.arange(1, 261), max_new_tokens=3,
                              arrival_s=engine.clock_s))
    allocator = engine.sglang_components().allocator

    def device_fault(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    allocator.alloc_extend = device_fault
    with pytest.raises(RuntimeError, match="illegal memory access"):
        engine.step()
    assert engine.last_rollback() is None
    assert engine.snapshot().counters.allocation_failures == 0


def test_unknown_fault_is_an_input_error(make_engine):
    """Only the three documented faults exist."""
    with pytest.raises(InputError, match="unknown fault 'bitflip'; valid: leak, lock-leak, alloc-fail"):
        make_engine().faults.inject("bitflip")


def test_clean_engine_passes_every_check(make_engine):
    """Without a fault the same workload is clean: residual 0, no off node, monotone."""
    engine = make_engine()
    _warm(engine)
    snap = engine.check_integrity()
    assert snap.ledger.residual_tokens == 0 and snap.refs.off_nodes == ()
    assert snap.refs.per_node and snap.refs.delta_ref_max == 0

"""The embedded engine with SGLang's HiCache behind its tree (engine_adapter/embedded/hicache.py).

Real SGLang objects throughout: the engine's UnifiedRadixCache with `init_hicache` (SGLang's
MHATokenToKVPoolHost, unpinned, and HybridCacheController, through the CPU stack strategy),
SGLang's PrefillAdder doing the load-back. The workload: eight distinct 60-token prompts,
then the same eight again, on a 256-token device pool (page 4) that holds about four of
them; with host ratio 2 the host pool (516 slots) holds all eight. Every second-round prompt
has lost its device copy (LRU) and finds its 56 page-aligned tokens (59 matchable, floored
to pages of 4) on host.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration

PROMPT, PROMPTS, MATCHED = 60, 8, 56


def engine_for(ratio: float | None, *, policy: str = "write_through", exact: bool = False):
    """A fresh engine: 256-token mha pool, page 4, SGLang's HiCache at `ratio` (None: off)."""
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine

    return EmbeddedEngine(EngineConfig(
        pool_tokens=256, page_size=4, kv_pool="mha", max_running_requests=8,
        max_context_len=512, token_budget=256, max_prefill_tokens=256, hicache_ratio=ratio,
        hicache_write_policy=policy, exact_batches=exact, whatif_rate=0))


def run(ratio: float | None, *, policy: str = "write_through", exact: bool = False):
    """Replay the two rounds; returns (engine, final snapshot, every request's SGLang Req)."""
    from engine_adapter.embedded.requests import RequestSpec

    engine = engine_for(ratio, policy=policy, exact=exact)
    reqs = []
    engine.internal_state().funnel.observers.append(lambda tracked: reqs.append(tracked.req))
    arrival = 0.0
    for round_ in range(2):
        for i in range(PROMPTS):
            engine.submit(RequestSpec(rid=f"r{round_}-{i}", tokens=np.arange(1, PROMPT + 1) + 1000 * i,
                                      max_new_tokens=2, arrival_s=arrival))
            arrival += 1.0
    engine.run_until_idle()
    engine.settle_transfers()
    return engine, engine.check_integrity(), reqs


def test_second_round_is_loaded_back_from_host_as_sglang_counts_it():
    """Host hits 8 x 56 = 448; SGLang's load acks, its per-request host_loaded_length and
    cached_tokens_host all sum to it; no device hit (every prefix was evicted)."""
    _engine, snap, reqs = run(2.0)
    io = snap.hicache
    assert io.hit_tokens_host == PROMPTS * MATCHED == 448
    assert io.loaded_tokens == sum(r.host_loaded_length for r in reqs) == 448
    assert sum(r.cached_tokens_host for r in reqs) == 448
    assert (io.hit_tokens_device, io.pending_loads, io.pending_writes) == (0, 0, 0)
    assert snap.funnel.hit_tokens == 448  # kvctl's own count: prefix_len after the load


def test_without_hicache_the_second_round_misses():
    """The same workload with no host tier: nothing survives on device, 0 hit tokens."""
    _engine, snap, _reqs = run(None)
    assert snap.funnel.hit_tokens == 0
    assert snap.hicache is None and snap.ledger.host is None


def test_write_through_backs_up_every_prompt_and_the_host_ledger_balances():
    """Write-through copies all 8 x 60 = 480 tokens to host; 516 slots, 36 free, all 480 held
    by tree nodes (residual 0)."""
    _engine, snap, _reqs = run(2.0)
    host = snap.ledger.host
    assert snap.hicache.written_tokens == 480
    assert (host.capacity_tokens, host.free_tokens, host.tree_tokens) == (516, 36, 480)
    assert host.residual_tokens == 0


def test_exact_batches_path_loads_back_the_same_tokens():
    """SGLang's ScheduleBatch path (prepare_for_extend's own tier split) gives the same 448."""
    _engine, snap, reqs = run(2.0, exact=True)
    assert snap.hicache.hit_tokens_host == snap.hicache.loaded_tokens == 448
    assert sum(r.cached_tokens_host for r in reqs) == 448


def test_in_flight_load_back_locks_reconcile_as_leases():
    """Right after the step that issues load-backs (acks not yet reaped), SGLang's load-back
    locks are counted as leases: the ref reconciliation finds protected delta 0."""
    from engine_adapter.embedded.requests import RequestSpec

    engine = engine_for(2.0)
    for i in range(PROMPTS):
        engine.submit(RequestSpec(rid=f"a{i}", tokens=np.arange(1, PROMPT + 1) + 1000 * i,
                                  max_new_tokens=2, arrival_s=float(i)))
    engine.run_until_idle()
    engine.submit(RequestSpec(rid="again", tokens=np.arange(1, PROMPT + 1), max_new_tokens=50,
                              arrival_s=engine.clock_s + 1.0))
    tree = engine.sglang_components().tree_cache
    # The engine is idle and "again" is its only request: one step may only jump the clock
    # to its arrival (stalls.py) and the next runs its prefill round, which finds its prefix
    # on host and issues the load-back (engine.step's order; today both happen in one step).
    steps = 2
    for _ in range(steps):
        engine.step()
        if tree.ongoing_load_back:
            break
    else:
        pytest.fail(f"no load-back in flight after {steps} steps (an idle jump and a prefill "
                    f"round): clock {engine.clock_s:.3f} s, has_work {engine.has_work()}")
    snap = engine.check_integrity()  # raises on a protected-token mismatch
    assert snap.refs.delta_protected_tokens == 0
    assert snap.hicache.pending_loads == 1

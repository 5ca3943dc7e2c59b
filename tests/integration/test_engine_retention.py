"""Tool-wait retention on the embedded engine: retain, drop, offload (seed 003 §6).

One session: turn 1 is a 300-token prompt with 5 output tokens; it commits 304 rows
(the last output token has no K/V yet), so 19 pages = 304 tokens are published. Turn 2 is
turn 1's prompt + its outputs + a 40-token observation (345 tokens, S_cap 344), arriving
one modeled second later. Default cost model: Llama-3-8B, 131,072 bytes of K/V per token,
a 64 GB/s host link, so 304 tokens move in 304 * 131072 / 64e9 = 0.000622592 s.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded.config import CostParams
from engine_adapter.embedded.requests import RequestSpec

pytestmark = pytest.mark.integration

TURN1 = np.arange(1, 301)
PUBLISHED = 304
TRANSFER_S = PUBLISHED * 131_072 / 64e9


def _turn1(engine, retention: str):
    engine.submit(RequestSpec(rid="t1", tokens=TURN1, max_new_tokens=5, session="s",
                              retention=retention, last_turn=False))
    (record,) = engine.run_until_idle()
    return record


def _turn2(engine, record, *, wait_s: float = 1.0):
    tokens = np.concatenate([TURN1, record.output_ids, np.arange(5_000, 5_040)])
    engine.submit(RequestSpec(rid="t2", tokens=tokens, max_new_tokens=3, session="s",
                              arrival_s=record.finish_s + wait_s))


def _finish(engine) -> dict:
    records = {}
    while engine.has_work():
        records.update({r.rid: r for r in engine.step().finished})
        engine.check_integrity()
    return records


def test_retain_keeps_the_path_protected_for_the_whole_wait(make_engine):
    """retain: during the tool wait the 304 published tokens are protected (locked by the
    session's lease, nothing evictable), and the lease is what explains the lock."""
    engine = make_engine()
    _turn1(engine, "retain")
    snap = engine.check_integrity()
    assert (snap.ledger.protected_tokens, snap.ledger.evictable_tokens) == (PUBLISHED, 0)
    (lease,) = [r for r in snap.requests if r.state == "retained"]
    assert (lease.rid, lease.prompt_tokens) == ("session:s", PUBLISHED)
    assert snap.refs.derived_protected_tokens == PUBLISHED and snap.refs.leases == 1
    assert engine.flush_cache() == 0  # a retained path cannot be evicted


def test_retained_path_is_hit_by_the_next_turn_and_the_lease_released(make_engine):
    """The next turn reuses all 304 retained tokens; once it is admitted the lease is gone
    and, after it finishes, nothing stays protected."""
    engine = make_engine()
    record = _turn1(engine, "retain")
    _turn2(engine, record)
    engine.step()
    assert not [r for r in engine.snapshot().requests if r.state == "retained"]
    records = _finish(engine)
    assert records["t2"].hit_tokens == PUBLISHED
    assert engine.check_integrity().ledger.protected_tokens == 0


def test_drop_publishes_the_path_evictable(make_engine):
    """drop: the 304 published tokens are evictable during the wait, nothing is protected."""
    engine = make_engine()
    _turn1(engine, "drop")
    ledger = engine.check_integrity().ledger
    assert (ledger.protected_tokens, ledger.evictable_tokens) == (0, PUBLISHED)


def test_dropped_and_evicted_path_is_recomputed(make_engine):
    """After a flush the dropped path is gone: the next turn hits 0 and the funnel counts it
    as evicted (computed before, no longer resident) with its 304 tokens."""
    engine = make_engine()
    record = _turn1(engine, "drop")
    assert engine.flush_cache() == PUBLISHED
    _turn2(engine, record)
    assert _finish(engine)["t2"].hit_tokens == 0
    evicted = {b.reason: (b.requests, b.tokens) for b in engine.snapshot().funnel.rejections}["evicted"]
    assert evicted == (1, PUBLISHED)
    assert engine.snapshot().counters.reloaded_tokens == 0


def test_offload_records_host_tokens_and_bytes(make_engine):
    """offload: 304 tokens and 304 * kv_bytes_per_token bytes go to the host tier."""
    engine = make_engine()
    _turn1(engine, "offload")
    snap = engine.check_integrity()
    assert snap.counters.offloaded_tokens == PUBLISHED
    assert snap.counters.offload_bytes == PUBLISHED * CostParams().kv_bytes_per_token == 39_845_888
    assert snap.ledger.host_tokens == PUBLISHED
    assert snap.ledger.evictable_tokens == PUBLISHED  # the device copy stays, evictable


def test_offloaded_then_evicted_turn_is_reloaded_not_recomputed(make_engine):
    """After eviction the next turn reloads 304 tokens from the host tier: mapping lag 304
    while the modeled transfer runs, one mapping stall of 0.000622592 s, and the reload
    counts as a 304-token hit."""
    engine = make_engine()
    record = _turn1(engine, "offload")
    engine.flush_cache()
    _turn2(engine, record)
    engine.step()
    lag = engine.check_integrity().mapping
    assert (lag.waiting_requests, lag.lag_tokens) == (1, PUBLISHED)
    records = _finish(engine)
    snap = engine.snapshot()
    assert records["t2"].hit_tokens == PUBLISHED
    assert snap.counters.reloaded_tokens == PUBLISHED
    assert snap.counters.reload_bytes == 39_845_888
    assert snap.mapping.stalls_total == 1
    assert snap.mapping.stall_seconds_total == pytest.approx(TRANSFER_S, rel=1e-12)
    assert snap.ledger.host_tokens == 0


def test_offloaded_turn_still_resident_is_hit_on_device(make_engine):
    """Without eviction the device copy serves the next turn: 304-token hit, no reload, and
    the host copy is released when the turn is admitted."""
    engine = make_engine()
    record = _turn1(engine, "offload")
    _turn2(engine, record)
    assert _finish(engine)["t2"].hit_tokens == PUBLISHED
    snap = engine.snapshot()
    assert (snap.counters.reloaded_tokens, snap.ledger.host_tokens) == (0, 0)


def test_reload_invalidated_by_a_generation_bump_is_discarded(make_engine):
    """A weight update while the reload is in flight: the reloaded rows are not used (hit
    0, funnel bucket stale_snapshot) and the turn is recomputed and still finishes."""
    engine = make_engine()
    record = _turn1(engine, "offload")
    engine.flush_cache()
    _turn2(engine, record)
    engine.step()  # admitted as a reload
    engine.bump_generation()
    records = _finish(engine)
    assert records["t2"].hit_tokens == 0 and len(records["t2"].output_ids) == 3
    buckets = {b.reason: b.requests for b in engine.snapshot().funnel.rejections}
    assert buckets["stale_snapshot"] == 1


def test_offload_larger_than_the_host_tier_is_not_kept(make_engine):
    """host_capacity_tokens=256 cannot hold 304 tokens: the host tier stays empty and the
    evicted turn is recomputed (no reload)."""
    engine = make_engine(host_capacity_tokens=256)
    record = _turn1(engine, "offload")
    assert engine.snapshot().ledger.host_tokens == 0
    engine.flush_cache()
    _turn2(engine, record)
    assert _finish(engine)["t2"].hit_tokens == 0
    assert engine.snapshot().counters.reloaded_tokens == 0


def test_reload_completes_while_other_requests_keep_the_engine_busy(make_engine):
    """A reload whose modeled transfer (0.59 ms) is done must not wait for the engine to go
    idle: the reloading turn finishes long before a 300-token decode running beside it."""
    engine = make_engine(pool_tokens=4096)
    record = _turn1(engine, "offload")
    engine.flush_cache()
    engine.submit(RequestSpec(rid="busy", tokens=np.arange(9_000, 9_100), max_new_tokens=300,
                              arrival_s=engine.clock_s))
    engine.step()
    _turn2(engine, record, wait_s=0.0)
    order = []
    while engine.has_work():
        order += [r.rid for r in engine.step().finished]
    assert order == ["t2", "busy"]


def test_two_reloads_in_one_round_fit_beside_the_prefixes_they_lock(make_engine):
    """Two tenants' offloaded turns (each a 128-token system prompt + 160 tokens of its own)
    are evicted; the system prompts come back to the device (256 evictable tokens, 256
    free). Both next turns ask to reload about 160 tokens. Admission must count each
    reload against the budget with its own prefix pinned, as SGLang's add_one_req does
    (`_lock_node`): 256 free cannot hold both spans once both prefixes are locked, so the
    round admits one and the other waits. Before that the round admitted both, the
    allocation failed and rolled back on every retry, and the engine stalled."""
    engine = make_engine(pool_tokens=512, page_size=16)
    system = np.arange(1, 129)
    turns = {}
    for tenant, base in (("t0", 10_000), ("t1", 20_000)):
        tokens = np.concatenate([system, np.arange(base, base + 160)])
        engine.submit(RequestSpec(rid=f"{tenant}-1", tokens=tokens, max_new_tokens=1,
                                  tenant=tenant, session=tenant, retention="offload",
                                  last_turn=False, arrival_s=engine.clock_s))
        (record,) = engine.run_until_idle()
        turns[tenant] = (tokens, record)
    engine.flush_cache()
    for tenant in turns:  # the system prompt alone, back on the device under each tenant
        engine.submit(RequestSpec(rid=f"{tenant}-sys", tokens=np.concatenate([system, [99_999]]),
                                  max_new_tokens=1, tenant=tenant, arrival_s=engine.clock_s))
    engine.run_until_idle()
    ledger = engine.check_integrity().ledger
    assert (ledger.free_tokens, ledger.evictable_tokens) == (256, 256)
    for tenant, (tokens, record) in turns.items():
        engine.submit(RequestSpec(
            rid=f"{tenant}-2", tokens=np.concatenate([tokens, record.output_ids, [7, 8, 9]]),
            max_new_tokens=1, tenant=tenant, session=tenant, arrival_s=engine.clock_s))
    records = _finish(engine)
    assert set(records) == {"t0-2", "t1-2"}
    snap = engine.snapshot()
    assert snap.counters.allocation_failures == 0
    assert snap.counters.reloaded_tokens == 2 * 160

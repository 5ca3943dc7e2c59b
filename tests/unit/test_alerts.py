"""Alert predicates on consecutive snapshots (seed 000 0x0CF joint predicates, seed 003).

Each alert is a joint predicate evaluated against the previous evaluation ("rising" means
the counter grew since then) and carries the numbers that made it true.
"""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.funnel import empty_funnel
from engine_adapter.instrument.alerts import AlertEvaluator, AlertInputs, AlertThresholds
from engine_adapter.instrument.funnel_recorder import AdmissionFacts, FunnelRecorder
from engine_adapter.snapshot import Counters, MappingLag, NodeRefCheck, PoolLedger, RefReconciliation

pytestmark = pytest.mark.unit

LEDGER = PoolLedger(page_size=16, pool_tokens=1024, free_tokens=512, evictable_tokens=256,
                    used_tokens=256, protected_tokens=128, private_tokens=128)
REFS = RefReconciliation(leases=2, recorded_protected_tokens=128, derived_protected_tokens=128,
                         nodes_checked=5, per_node=True)
IDLE_MAP = MappingLag(waiting_requests=0, lag_tokens=0, max_wait_seconds=0.0, stalls_total=0,
                      stall_seconds_total=0.0)
HIT = AdmissionFacts(s_prompt=1024, s_cap=1023, authorized=True, s_any=512, s_ns=512, s_sem=512,
                     s_indexed=512, leased=True, mapped=True, snapshot_current=True, s_runtime=512)


def _inputs(*, ledger=LEDGER, counters=Counters(), funnel=None, refs=REFS, mapping=IDLE_MAP):
    return AlertInputs(ledger=ledger, counters=counters, funnel=funnel or empty_funnel(),
                       refs=refs, mapping=mapping)


def _names(alerts) -> set[str]:
    return {a.name for a in alerts}


def _funnel(*facts) -> object:
    recorder = FunnelRecorder()
    for f in facts:
        recorder.record(f)
    return recorder.freeze()


def test_quiet_engine_raises_nothing():
    """Healthy numbers, nothing rising: no alert."""
    evaluator = AlertEvaluator()
    assert evaluator.evaluate(_inputs()) == ()
    assert evaluator.evaluate(_inputs()) == ()


def test_first_evaluation_sees_nothing_rising():
    """Counters already non-zero at the first read are not 'rising'."""
    full = dataclasses.replace(LEDGER, free_tokens=0, evictable_tokens=0, used_tokens=1024,
                               private_tokens=896)
    alerts = AlertEvaluator().evaluate(_inputs(ledger=full, counters=Counters(allocation_failures=9)))
    assert "allocator_exhaustion" not in _names(alerts)


def test_allocator_exhaustion_needs_no_free_no_evictable_and_rising_failures():
    """free == 0 and evictable == 0 and allocation_failures rising."""
    full = dataclasses.replace(LEDGER, free_tokens=0, evictable_tokens=0, used_tokens=1024,
                               private_tokens=896)
    evaluator = AlertEvaluator()
    evaluator.evaluate(_inputs(ledger=full))
    (alert,) = [a for a in evaluator.evaluate(_inputs(ledger=full, counters=Counters(allocation_failures=2)))
                if a.name == "allocator_exhaustion"]
    assert alert.severity == "critical"
    assert alert.evidence == "free=0 evictable=0 allocation_failures+=2"


def test_failures_with_evictable_cache_are_not_exhaustion():
    """Evictable cache left: allocation failures alone do not mean exhaustion."""
    evaluator = AlertEvaluator()
    evaluator.evaluate(_inputs())
    assert "allocator_exhaustion" not in _names(evaluator.evaluate(_inputs(counters=Counters(allocation_failures=2))))


def test_locked_cache_pressure():
    """free == 0, evictable > 0, locked-eviction rejects rising."""
    tight = dataclasses.replace(LEDGER, free_tokens=0, evictable_tokens=256, used_tokens=768,
                                private_tokens=640)
    evaluator = AlertEvaluator()
    evaluator.evaluate(_inputs(ledger=tight))
    alerts = evaluator.evaluate(_inputs(ledger=tight, counters=Counters(locked_eviction_rejects=3)))
    (alert,) = [a for a in alerts if a.name == "locked_cache_pressure"]
    assert alert.evidence == "free=0 evictable=256 locked_eviction_rejects+=3"


def test_reference_leak_waits_out_the_grace_and_names_the_node():
    """delta_ref != 0 for more than leak_grace_evaluations (1) evaluations: the alert names
    the node with its recorded and derived counts; it clears when the delta is gone."""
    leaked = dataclasses.replace(REFS, recorded_protected_tokens=192, off_nodes=(
        NodeRefCheck(node_id=7, recorded=2, derived=1, tokens=64, requests=("r1",)),))
    evaluator = AlertEvaluator()
    assert "reference_leak" not in _names(evaluator.evaluate(_inputs(refs=leaked)))
    (alert,) = [a for a in evaluator.evaluate(_inputs(refs=leaked)) if a.name == "reference_leak"]
    assert alert.evidence == "delta_protected_tokens=64 node 7 recorded=2 derived=1"
    assert "reference_leak" not in _names(evaluator.evaluate(_inputs()))


def test_mapping_stall_needs_lag_and_an_old_wait():
    """L_map > 0 and the oldest wait beyond the SLO budget (1 s)."""
    stalled = MappingLag(waiting_requests=1, lag_tokens=304, max_wait_seconds=1.5, stalls_total=0,
                         stall_seconds_total=0.0)
    young = dataclasses.replace(stalled, max_wait_seconds=0.2)
    assert "mapping_stall" not in _names(AlertEvaluator().evaluate(_inputs(mapping=young)))
    (alert,) = [a for a in AlertEvaluator().evaluate(_inputs(mapping=stalled)) if a.name == "mapping_stall"]
    assert alert.evidence == "L_map=304 tokens, oldest wait 1.500s > 1.0s"


def test_compatibility_churn_and_security_pressure_on_cross_namespace_rejects():
    """Candidates rising while cross-namespace rejects rise: compatibility churn and
    security boundary pressure."""
    before = _funnel(HIT)
    after = _funnel(HIT, dataclasses.replace(HIT, s_ns=0, s_sem=0, s_indexed=0, s_runtime=0))
    evaluator = AlertEvaluator()
    evaluator.evaluate(_inputs(funnel=before))
    alerts = {a.name: a.evidence for a in evaluator.evaluate(_inputs(funnel=after))}
    assert alerts["compatibility_churn"] == "candidates+=1 incompatible_rejects+=1"
    assert alerts["security_boundary_pressure"] == "unauthorized+=0 cross_namespace+=1"


def test_stale_receipt_race_on_rising_stale_generation_rejects():
    """Candidates rising with stale-generation rejects rising."""
    before = _funnel(HIT)
    after = _funnel(HIT, dataclasses.replace(HIT, s_sem=0, s_indexed=0, s_runtime=0))
    evaluator = AlertEvaluator()
    evaluator.evaluate(_inputs(funnel=before))
    alerts = {a.name: a.evidence for a in evaluator.evaluate(_inputs(funnel=after))}
    assert alerts["stale_receipt_race"] == "candidates+=1 stale_generation_rejects+=1"


def test_unauthorized_lookups_raise_security_boundary_pressure():
    """An unauthorized-namespace reject alone is security pressure, not churn."""
    refused = dataclasses.replace(HIT, authorized=False, s_any=0, s_ns=0, s_sem=0, s_indexed=0,
                                  s_runtime=0)
    evaluator = AlertEvaluator()
    evaluator.evaluate(_inputs(funnel=_funnel(HIT)))
    alerts = {a.name: a.evidence for a in evaluator.evaluate(_inputs(funnel=_funnel(HIT, refused)))}
    assert alerts == {"security_boundary_pressure": "unauthorized+=1 cross_namespace+=0"}


def test_admission_ceiling_quiet_on_a_warm_healthy_server():
    """U_KV 0.99 (a warm radix cache: 70% of the pool evictable), token_usage 0.3, no
    retraction or allocation failure: the ceiling stays quiet (evictable tokens absorb)."""
    warm = dataclasses.replace(LEDGER, free_tokens=10, evictable_tokens=707, used_tokens=307,
                               protected_tokens=200, private_tokens=107)
    assert (round(warm.u_kv, 2), round(warm.token_usage, 2)) == (0.99, 0.30)
    evaluator = AlertEvaluator(AlertThresholds(tau_high=0.88))
    evaluator.evaluate(_inputs(ledger=warm, counters=Counters(retractions=3)))
    assert evaluator.evaluate(_inputs(ledger=warm, counters=Counters(retractions=3))) == ()


def test_admission_ceiling_fires_at_a_real_wall():
    """U_KV 0.9375 > 0.88 with token_usage 0.9375 > 0.9: evictable tokens cannot absorb."""
    wall = dataclasses.replace(LEDGER, free_tokens=64, evictable_tokens=0, used_tokens=960,
                               protected_tokens=128, private_tokens=832)
    (alert,) = AlertEvaluator(AlertThresholds(tau_high=0.88)).evaluate(_inputs(ledger=wall))
    assert (alert.name, alert.evidence) == (
        "admission_ceiling", "U_KV=0.938 > tau_high=0.88 and token_usage=0.938 > 0.9")


def test_admission_ceiling_fires_when_retractions_rise():
    """U_KV 0.9375, token_usage only 0.4375, but SGLang retracted 2 requests since the last
    evaluation: the wall is real even though much of the pool is still evictable."""
    busy = dataclasses.replace(LEDGER, free_tokens=64, evictable_tokens=512, used_tokens=448,
                               private_tokens=320)
    evaluator = AlertEvaluator(AlertThresholds(tau_high=0.88))
    assert evaluator.evaluate(_inputs(ledger=busy, counters=Counters(retractions=5))) == ()
    (alert,) = evaluator.evaluate(_inputs(ledger=busy, counters=Counters(retractions=7)))
    assert (alert.name, alert.evidence) == (
        "admission_ceiling", "U_KV=0.938 > tau_high=0.88 and retractions+=2")


def test_hit_rate_collapse_after_a_harness_change():
    """seed 003 'What breaks the hit rate': long-run H_prefix 0.5; a window of >= 2048
    prompt tokens with no hit (< half of it) raises the alert."""
    evaluator = AlertEvaluator()
    warm = _funnel(*[HIT] * 4)  # 4096 prompt tokens, 2048 hit: H = 0.5
    evaluator.evaluate(_inputs(funnel=_funnel()))
    assert "hit_rate_collapse" not in _names(evaluator.evaluate(_inputs(funnel=warm)))
    miss = dataclasses.replace(HIT, s_any=0, s_ns=0, s_sem=0, s_indexed=0, s_runtime=0)
    broken = _funnel(*[HIT] * 4, *[miss] * 2)  # 2048 more prompt tokens, no hit
    (alert,) = [a for a in evaluator.evaluate(_inputs(funnel=broken)) if a.name == "hit_rate_collapse"]
    assert alert.evidence == "recent H_prefix=0.000 < 0.5 x long-run 0.333"

"""Alert predicates evaluated on consecutive snapshots (seed 000 0x0CF, seed 003).

Joint predicates, never bare thresholds; each alert carries the numbers that made it true.
"Rising" means the counter grew since the previous evaluation; "stable" means it did not.

    allocator_exhaustion      free == 0 and evictable == 0 and allocation failures rising
    locked_cache_pressure     free == 0 and evictable > 0 and locked-eviction rejects rising
    reference_leak            delta_ref != 0 (or protected-token delta != 0) for > grace evaluations
    mapping_stall             lag > 0 and the oldest wait > slo budget
    compatibility_churn       candidates rising and compatible stable (incompatible rejects rising)
    stale_receipt_race        candidates rising and stale-generation rejects rising
    security_boundary_pressure  unauthorized or cross-namespace rejects rising
    admission_ceiling         U_KV > tau_high (seed 003 figure 12) and pressure evictable
                              tokens cannot absorb: token_usage > usage_high, or retractions
                              or allocation failures rising (see _admission_ceiling)
    hit_rate_collapse         recent H_prefix < half of the long-run H_prefix (seed 003,
                              "What breaks the hit rate")
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_adapter.funnel import Funnel
from engine_adapter.snapshot import Alert, Counters, MappingLag, PoolLedger, RefReconciliation


@dataclass(frozen=True, kw_only=True)
class AlertThresholds:
    tau_high: float = 0.88
    usage_high: float = 0.9  # SGLang's token_usage: the share evictable tokens cannot free
    map_wait_slo_s: float = 1.0
    leak_grace_evaluations: int = 1
    collapse_ratio: float = 0.5
    collapse_min_prompt_tokens: int = 2048


@dataclass(frozen=True, kw_only=True)
class AlertInputs:
    ledger: PoolLedger
    counters: Counters
    funnel: Funnel
    refs: RefReconciliation
    mapping: MappingLag | None


def _rejects(funnel: Funnel, reason: str) -> int:
    for bucket in funnel.rejections:
        if bucket.reason == reason:
            return bucket.requests or 0
    return 0


class AlertEvaluator:
    """Keeps the previous evaluation to tell rising from stable."""

    def __init__(self, thresholds: AlertThresholds | None = None) -> None:
        self.thresholds = thresholds or AlertThresholds()
        self._previous: AlertInputs | None = None
        self._leak_streak = 0
        self._window_prompt = 0
        self._window_hits = 0

    def evaluate(self, now: AlertInputs) -> tuple[Alert, ...]:
        prev = self._previous or now
        t = self.thresholds
        led, cnt, prv = now.ledger, now.counters, prev.counters
        alerts: list[Alert] = []

        def rising(attr: str) -> int:  # an unobservable counter (None) never rises
            now_value, prev_value = getattr(cnt, attr), getattr(prv, attr)
            if now_value is None or prev_value is None:
                return 0
            return now_value - prev_value

        if led.free_tokens == 0 and led.evictable_tokens == 0 and rising("allocation_failures") > 0:
            alerts.append(Alert(name="allocator_exhaustion", severity="critical",
                                evidence=f"free=0 evictable=0 allocation_failures+={rising('allocation_failures')}"))
        if led.free_tokens == 0 and led.evictable_tokens > 0 and rising("locked_eviction_rejects") > 0:
            alerts.append(Alert(name="locked_cache_pressure", severity="warning",
                                evidence=f"free=0 evictable={led.evictable_tokens} "
                                f"locked_eviction_rejects+={rising('locked_eviction_rejects')}"))
        leak = (now.refs.delta_ref_max or 0) != 0 or (now.refs.delta_protected_tokens or 0) != 0
        self._leak_streak = self._leak_streak + 1 if leak else 0
        if self._leak_streak > t.leak_grace_evaluations:
            nodes = ", ".join(f"node {n.node_id} recorded={n.recorded} derived={n.derived}"
                              for n in now.refs.off_nodes[:3])
            alerts.append(Alert(name="reference_leak", severity="critical",
                                evidence=f"delta_protected_tokens={now.refs.delta_protected_tokens} {nodes}".strip()))
        mapping = now.mapping  # None: a host that cannot see load-back lag
        if (mapping is not None and mapping.lag_tokens > 0
                and mapping.max_wait_seconds > t.map_wait_slo_s):
            alerts.append(Alert(name="mapping_stall", severity="warning",
                                evidence=f"L_map={mapping.lag_tokens} tokens, oldest wait "
                                f"{mapping.max_wait_seconds:.3f}s > {t.map_wait_slo_s}s"))
        f_now, f_prev = now.funnel, prev.funnel
        cand_up = (f_now.stage("candidates").requests or 0) - (f_prev.stage("candidates").requests or 0)
        incompat_up = _rejects(f_now, "incompatible_namespace") - _rejects(f_prev, "incompatible_namespace")
        stale_up = _rejects(f_now, "stale_generation") - _rejects(f_prev, "stale_generation")
        security_up = (_rejects(f_now, "unauthorized_namespace") - _rejects(f_prev, "unauthorized_namespace"))
        if incompat_up > 0 and cand_up > 0:
            alerts.append(Alert(name="compatibility_churn", severity="warning",
                                evidence=f"candidates+={cand_up} incompatible_rejects+={incompat_up}"))
        if stale_up > 0 and cand_up > 0:
            alerts.append(Alert(name="stale_receipt_race", severity="warning",
                                evidence=f"candidates+={cand_up} stale_generation_rejects+={stale_up}"))
        if security_up > 0 or incompat_up > 0:
            alerts.append(Alert(name="security_boundary_pressure", severity="warning",
                                evidence=f"unauthorized+={security_up} cross_namespace+={incompat_up}"))
        ceiling = self._admission_ceiling(led, rising("retractions"),
                                          rising("allocation_failures"))
        if ceiling:
            alerts.append(ceiling)
        collapse = self._hit_rate_collapse(now, prev)
        if collapse:
            alerts.append(collapse)
        self._previous = now
        return tuple(alerts)

    def _admission_ceiling(self, led: PoolLedger, retractions_up: int,
                           failures_up: int) -> Alert | None:
        """seed 003's ceiling as a seed 000 0x0CF joint predicate. U_KV counts evictable
        tokens as allocated and SGLang's radix cache keeps every finished prefix, so a warm,
        healthy server sits at U_KV 0.98-0.99 (kvctl sandbox under traffic: ~80% of the pool
        evictable, token_usage ~0.2). SGLang admits by evicting (PrefillAdder counts
        evictable tokens as available), so the ceiling only bites when the non-evictable
        share (token_usage) fills the pool, or the scheduler already retracts requests, or
        an allocation failed after eviction. Evictions alone are the warm steady state."""
        t = self.thresholds
        if led.u_kv <= t.tau_high:
            return None
        pressure = []
        if led.token_usage > t.usage_high:
            pressure.append(f"token_usage={led.token_usage:.3f} > {t.usage_high}")
        if retractions_up > 0:
            pressure.append(f"retractions+={retractions_up}")
        if failures_up > 0:
            pressure.append(f"allocation_failures+={failures_up}")
        if not pressure:
            return None
        return Alert(name="admission_ceiling", severity="warning",
                     evidence=f"U_KV={led.u_kv:.3f} > tau_high={t.tau_high} and "
                              + " and ".join(pressure))

    def _hit_rate_collapse(self, now: AlertInputs, prev: AlertInputs) -> Alert | None:
        t = self.thresholds
        self._window_prompt += now.funnel.prompt_tokens - prev.funnel.prompt_tokens
        self._window_hits += now.funnel.hit_tokens - prev.funnel.hit_tokens
        if self._window_prompt < t.collapse_min_prompt_tokens:
            return None
        recent = self._window_hits / self._window_prompt
        overall = now.funnel.hit_rate or 0.0
        self._window_prompt = self._window_hits = 0
        if overall > 0 and recent < t.collapse_ratio * overall:
            return Alert(name="hit_rate_collapse", severity="warning",
                         evidence=f"recent H_prefix={recent:.3f} < {t.collapse_ratio} x long-run {overall:.3f}")
        return None

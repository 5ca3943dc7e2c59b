"""`kvctl check`: run a scenario on the embedded engine and verify integrity after every step.

After each step: the pool ledger balances (residual 0), every node's recorded lock_ref
equals the leases that explain it (delta_ref 0, read from SGLang's own per-node view), the
funnel is monotone, no request reused more than its namespace and generation computed,
and SGLang's own `sanity_check()` passes whenever the engine is idle.

`inject` deliberately breaks the engine once (test-only faults, see faults.py) to prove
each check can fail: `leak` and `lock-leak` must be caught and named; `alloc-fail` must
show the admission rolled back with the state digest unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_adapter.embedded.engine import EmbeddedEngine
from engine_adapter.embedded.faults import FAULTS
from kvctl.errors import InputError, IntegrityError


@dataclass(kw_only=True)
class CheckResult:
    scenario: str
    tree_core: str
    eviction_policy: str
    steps: int = 0
    requests_finished: int = 0
    pool_residual_max_tokens: int = 0
    delta_ref_max: int = 0
    funnel_monotone: bool = True
    hit_rate: float | None = None
    evictions: int = 0
    retractions: int = 0
    violations: list[str] = field(default_factory=list)
    fault: str | None = None
    fault_outcome: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations


def run_check(
    scenario_path: str,
    *,
    steps: int | None = None,
    tree_core: str = "rust",
    eviction: str | None = None,
    inject: str | None = None,
    inject_after: int = 50,
    on_step=None,
    device: str = "cpu",
) -> CheckResult:
    """Run and check; never raises for an integrity violation (it is recorded)."""
    from kvctl.replay.engine_setup import engine_config
    from kvctl.replay.scenario import load_scenario

    if inject is not None and inject not in FAULTS:
        raise InputError(f"unknown fault {inject!r}; valid: {', '.join(FAULTS)}")
    driver = load_scenario(scenario_path)
    defaults = dict(driver.engine_defaults)
    if eviction is not None:
        defaults["eviction_policy"] = eviction
    pool = defaults.pop("pool_tokens", None)
    config = engine_config(pool_tokens=pool, tree_core=tree_core, device=device, **defaults)
    engine = EmbeddedEngine(config)
    result = CheckResult(scenario=driver.name, tree_core=tree_core, eviction_policy=config.eviction_policy,
                         fault=inject)
    driver.prime(engine)
    pending_fault = inject
    while steps is None or result.steps < steps:
        if not engine.has_work() and driver.exhausted():
            break
        if pending_fault and result.steps >= inject_after and engine.faults.ready(pending_fault):
            if engine.faults.inject(pending_fault):
                pending_fault = None
        report = engine.step()
        result.steps += 1
        driver.after_step(engine, report)
        rollback = engine.last_rollback() if inject == "alloc-fail" else None
        if rollback is not None and result.fault_outcome is None:
            before, after = rollback
            result.fault_outcome = ("admission rolled back, state digest unchanged" if before == after
                                    else f"rollback changed state: {before} -> {after}")
            if before != after:
                result.violations.append(f"step {result.steps}: {result.fault_outcome}")
        _check_step(engine, result)
        if on_step is not None:
            on_step(result)
        if result.violations:
            break
        if report.idle and not engine.has_work() and driver.exhausted():
            break
    if inject and pending_fault:
        result.violations.append(f"fault {inject} could not be injected in {result.steps} steps")
    if inject == "alloc-fail" and result.fault_outcome is None and not pending_fault:
        result.violations.append("alloc-fail injected but no admission was attempted afterwards")
    snap = engine.snapshot()
    result.requests_finished = snap.counters.requests_finished
    result.hit_rate = snap.hit_rate
    result.evictions = snap.counters.evictions
    result.retractions = snap.counters.retractions
    return result


def _check_step(engine: EmbeddedEngine, result: CheckResult) -> None:
    try:
        snap = engine.check_integrity()
    except IntegrityError as err:
        snap = engine.snapshot(per_node_refs=True)
        result.violations.append(f"step {result.steps}: {err}")
    result.pool_residual_max_tokens = max(result.pool_residual_max_tokens, abs(snap.ledger.residual_tokens))
    result.delta_ref_max = max(result.delta_ref_max, snap.refs.delta_ref_max or 0,
                               abs(snap.refs.delta_protected_tokens or 0))
    result.funnel_monotone = result.funnel_monotone and snap.funnel.is_monotone()

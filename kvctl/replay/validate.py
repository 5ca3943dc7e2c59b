"""Replay a workload under a `plan recommend` recommendation and compare it with the plan.

    Recommendation + CapacityPlan --replay_target()--> ReplayTarget (kvctl.sizing, pure)
        --> ReplaySettings + prepare() --> config with the host tier and clock aligned
        --> run() on SGLang's real radix cache (CPU, NoOp pool sized in tokens; with
            HiCache advice, the mha pool and SGLang's HiCache host tier)
        --> ReplayedFigures --compare()--> rows (analytic | replayed | why)

The recommendation's settings win over a scenario's `engine:` suggestions (pool, page
size, eviction policy, max running requests, token budget, tau_high, host tier); the rest
of the scenario (its sessions, tools and per-tool retention, max context) is replayed as
written. The virtual clock prices the user's deployment (model, GPU, TP) through
`Deployment`, with the recommendation's prefill MFU and m_token.

Mutates nothing outside the engine the runner builds. Raises InputError for a bad workload
(before any engine exists) and RuntimeFailure/IntegrityError from the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvctl.replay.engine_setup import Deployment
from kvctl.replay.hicache_options import apply_hicache, offloads_tool_waits
from kvctl.replay.report import ReplayReport
from kvctl.replay.runner import PreparedReplay, Progress, ReplaySettings, prepare, run
from kvctl.replay.timeline import TimelineRow
from kvctl.sizing.models import resolve_model
from kvctl.sizing.plan.capacity import CapacityPlan
from kvctl.sizing.plan.recommend import Recommendation
from kvctl.sizing.plan.validate import (HICACHE_BY_MODEL, HICACHE_BY_SGLANG, ComparisonRow,
                                        ReplayedFigures, ReplayTarget, compare, replay_target,
                                        validated_by)

# Sample every step (timeline_every_s=0.0, whatever the workload's horizon) so the peak
# decode batch is exact: a limited replay runs some 10^4 steps (a row is ~0.5 KB); past
# this the recorder decimates and the timeline's peaks become sampled.
TIMELINE_ROWS = 200_000


@dataclass(frozen=True, kw_only=True)
class ReplayValidation:
    """A replay of the recommendation: what ran, what it measured, and the comparison."""

    workload: dict  # path, name, kind, requests (the runner's header)
    target: ReplayTarget
    settings: dict  # the runner's resolved settings, as replayed
    replayed_with: tuple[str, ...]  # mapping lines: "setting <- source"
    figures: ReplayedFigures
    rows: tuple[ComparisonRow, ...]
    report: ReplayReport
    notes: tuple[str, ...]


def validate_with_replay(
    *,
    workload: str,
    recommendation: Recommendation,
    plan: CapacityPlan,
    deployment: Deployment,
    tau_high: float,
    prefill_mfu: float,
    pp: int = 1,
    limit: int | None = None,
    seed: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> ReplayValidation:
    """Replay `workload` with the recommendation's settings on one replica; compare."""
    target = replay_target(recommendation=recommendation, plan=plan, tau_high=tau_high,
                           prefill_mfu=prefill_mfu)
    settings = ReplaySettings(
        workload=workload, deployment=deployment, pool_tokens=target.pool_tokens,
        page_size=target.page_size, eviction_policy=target.eviction_policy,
        tau_high=target.tau_high, token_budget=target.token_budget,
        max_running_requests=target.max_running_requests, limit=limit, seed=seed,
        label="plan recommend",
    )
    prepared = prepare(settings)
    if target.hicache_enabled and _uses_kvctl_host_model(prepared):
        target = validated_by(target, HICACHE_BY_MODEL, recommendation, plan)
    prepared = _aligned(prepared, target)
    result = run(prepared, on_progress=on_progress, max_timeline_rows=TIMELINE_ROWS,
                 timeline_every_s=0.0)
    figures = _figures(result.report, result.timeline, prepared)
    notes = list(result.report.notes)
    if pp > 1:
        notes.append(f"the virtual clock prices TP{deployment.tp} only; "
                     f"PP={pp} stages are not modeled")
    longest = prepared.config.max_context_len
    window = resolve_model(deployment.model).max_context
    return ReplayValidation(
        workload=dict(prepared.workload), target=target, settings=dict(prepared.resolved),
        replayed_with=target.mappings + (
            f"max context {longest:,} <- the workload, not the plan ({deployment.model}'s "
            f"window is {window:,}; longer requests are priced anyway)",
            f"virtual clock <- {deployment.model} on {deployment.gpu} x TP{deployment.tp} "
            "(roofline, modeled)",
        ),
        figures=figures,
        rows=compare(recommendation=recommendation, plan=plan, target=target, figures=figures),
        report=result.report,
        notes=tuple(notes),
    )


def _aligned(prepared: PreparedReplay, target: ReplayTarget) -> PreparedReplay:
    """The runner's config with the two settings `ReplaySettings` has no option for: the
    host tier (HiCache: SGLang's, the host tokens as a ratio of the pool; or kvctl's model,
    `validated_by`) and the clock's prefill MFU and m_token (the plan's, not the preset's
    defaults), so the replay prices the iterations the plan priced."""
    config = prepared.config
    cost = replace(config.cost, prefill_mfu=target.prefill_mfu,
                   kv_bytes_per_token=target.kv_bytes_per_token)
    resolved = {**prepared.resolved, "pool_source": "kvctl plan recommend (one replica)",
                "host_capacity_tokens": target.host_capacity_tokens}
    if target.hicache_validated_by == HICACHE_BY_SGLANG:  # SGLang's HiCache, host tokens as a ratio
        config, resolved["hicache"], _ = apply_hicache(
            replace(config, cost=cost), ratio=(target.host_capacity_tokens + 0.5) / config.pool_tokens,
            size_gb=None, write_policy=None, tp=1, scenario=getattr(prepared.driver, "scenario", None))
        resolved["kv_pool"] = config.kv_pool
    else:
        config = replace(config, host_capacity_tokens=target.host_capacity_tokens, cost=cost)
    config.validate()
    return replace(prepared, config=config, resolved=resolved)


def _uses_kvctl_host_model(prepared: PreparedReplay) -> bool:
    """Whether the workload offloads tool waits (kvctl's host-tier model), which cannot run
    beside SGLang's HiCache (hicache_options.apply_hicache refuses the two together)."""
    return (offloads_tool_waits(getattr(prepared.driver, "scenario", None))
            or prepared.config.default_retention == "offload")


def _figures(report: ReplayReport, timeline: tuple[TimelineRow, ...],
             prepared: PreparedReplay) -> ReplayedFigures:
    """Plain numbers from the report, plus the peaks only the timeline holds (the report
    has no running-request count: the decode batch of a step is the running set)."""
    snap = report.snapshot
    counters = snap.counters
    itl = report.latency.itl_s
    driver_scenario = getattr(prepared.driver, "scenario", None)
    shared = (None if driver_scenario is None else
              driver_scenario.system_tokens + driver_scenario.tool_schema_tokens)
    return ReplayedFigures(
        requests=counters.requests_finished,
        prompt_tokens=snap.funnel.prompt_tokens,
        output_tokens=counters.decode_tokens,
        workload_shared_tokens=shared,
        peak_decode_batch=max((row.decode_requests_step for row in timeline), default=0),
        timeline_every_s=report.utilization.sample_every_s,
        peak_prefill_tokens_step=max((row.prefill_tokens_step for row in timeline), default=0),
        admission_deferrals=counters.admission_deferrals or 0,
        retractions=counters.retractions,
        evictions=counters.evictions,
        evicted_tokens=counters.evicted_tokens,
        peak_kv_utilization=report.utilization.peak_kv_utilization,
        peak_token_usage=report.utilization.peak_token_usage,
        hit_rate=report.hit_rate,
        itl_p50_s=itl.p50,
        itl_p99_s=itl.p99,
        decode_bandwidth_efficiency=prepared.config.cost.decode_bandwidth_efficiency,
        step_overhead_s=prepared.config.cost.step_overhead_s,
    )

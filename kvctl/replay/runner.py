"""Run one replay: resolve the settings, build the embedded engine, drive the workload,
sample a timeline, and assemble the report.

    settings --prepare()--> PreparedReplay (workload validated, pool sized, EngineConfig)
             --run()-----> ReplayResult (report + timeline rows)

`prepare` does every check that can fail on bad input (a malformed trace line, an unknown
policy, a pool smaller than one request's pages) before an engine exists, so bad input
costs no SGLang import and leaves nothing written.

Mutates nothing outside the engine it builds, except torch's intra-op thread count, which
it sets to 1 for the run and restores: the engine's CPU tensors are a few thousand
elements, and on a small shared machine OpenMP threads spin against each other (measured
here: `searchsorted` over 8,192 ids 7.7 ms with 2 threads, 24 us with 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from engine_adapter.embedded.config import EngineConfig, sglang_default_max_running
from kvctl.errors import InputError, IntegrityError
from kvctl.replay.clock import replay_clock
from kvctl.replay.engine_setup import Deployment, engine_config
from kvctl.replay.hicache_options import apply_hicache
from kvctl.replay.report import Integrity, LatencyCollector, ReplayReport, Utilization
from kvctl.replay.peaks import PoolPeaks
from kvctl.replay.trace_blocks import check_block_pages
from kvctl.replay.timeline import TimelineRecorder, TimelineRow, for_horizon, row_from
from kvctl.replay.workloads import open_workload
from kvctl.util.pages import page_ceil

PROGRESS_EVERY_STEPS = 25
REFS_EVERY_SAMPLES = 8  # timeline samples per token-level refcount reconciliation
DEFAULT_PAGE_SIZE = 16
DEFAULT_MAX_CONTEXT = 32_768
RETENTION_CHOICES = ("retain", "drop", "offload", "auto")
# EngineConfig fields a scenario's `engine:` block may suggest; CLI options win over them.
_SCENARIO_FIELDS = ("page_size", "eviction_policy", "token_budget", "tau_high",
                    "schedule_policy", "max_prefill_tokens",
                    "max_running_requests", "max_context_len", "default_retention",
                    "host_capacity_tokens", "authorized")


@dataclass(frozen=True, kw_only=True)
class ReplaySettings:
    """The operator's choices for one replay; picklable (sweep workers get one each).

    None means "not given": the workload's suggestion applies, else kvctl's default.
    pool: `pool_tokens` (0 = unbounded: the workload's total demand), else `pool_gb`, else
    a scenario's `pool_tokens`, else what `kvctl size` gives the deployment.
    retention: retain | drop | offload set the engine's default; auto (or None) keeps the
    engine default and the scenario's per-tool policies (seed 003 break-even).
    """

    workload: str
    deployment: Deployment = Deployment()
    pool_tokens: int | None = None
    pool_gb: float | None = None
    page_size: int | None = None
    eviction_policy: str | None = None
    tree_core: str = "rust"
    retention: str | None = None
    tau_high: float | None = None
    token_budget: int | None = None  # SGLang's --chunked-prefill-size
    max_prefill_tokens: int | None = None
    schedule_policy: str | None = None
    max_running_requests: int | None = None
    decode_quantum: int | None = None  # retired: only 1 is accepted (config.QUANTUM_RETIRED)
    exact_batches: bool = False  # SGLang's ScheduleBatch path instead of the direct one
    limit: int | None = None
    seed: int | None = None  # None: a scenario's own seed; 0 for the engine
    label: str = ""
    device: str = "cpu"  # where SGLang's pools live; resolved from --device by the CLI
    # The clock: a `kvctl calibrate` model file or a fitted StepCostModel; None: the roofline.
    cost_model: object | None = None
    # SGLang's HiCache (kvctl/replay/hicache_options.py); all None: no host tier
    hicache_ratio: float | None = None
    hicache_size: int | None = None  # GB, as SGLang's --hicache-size
    hicache_write_policy: str | None = None


@dataclass(frozen=True, kw_only=True)
class Progress:
    """What a progress bar shows; hit_rate is as of the latest timeline sample."""

    requests_done: int
    requests_total: int | None
    virtual_time_s: float
    hit_rate: float
    steps: int


@dataclass(frozen=True, kw_only=True)
class PreparedReplay:
    """A validated replay, ready to run once (its driver reads the workload as it goes)."""

    settings: ReplaySettings
    driver: object  # WorkloadDriver
    config: EngineConfig
    deployment: Deployment
    workload: dict
    resolved: dict
    notes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    report: ReplayReport
    timeline: tuple[TimelineRow, ...]


def prepare(settings: ReplaySettings) -> PreparedReplay:
    """Open and validate the workload, size the pool, build a validated EngineConfig.
    Raises InputError for anything wrong with the inputs; builds no engine."""
    driver = open_workload(settings.workload, seed=settings.seed, limit=settings.limit)
    config, resolved, notes = resolve_config(settings, driver)
    summary = getattr(driver, "summary", None)
    workload = {
        "path": str(settings.workload),
        "name": driver.name,
        "kind": "mooncake" if summary is not None else "scenario",
        "requests": driver.total_hint(),
    }
    if summary is not None:
        workload.update(prompt_tokens=summary.prompt_tokens, output_tokens=summary.output_tokens,
                        max_request_tokens=summary.max_request_tokens)
    return PreparedReplay(settings=settings, driver=driver, config=config,
                          deployment=settings.deployment, workload=workload,
                          resolved=resolved, notes=notes)


def run(prepared: PreparedReplay, *, on_progress: Callable[[Progress], None] | None = None,
        max_timeline_rows: int = 1000, timeline_every_s: float | None = None,
        on_finished: Callable[[object], None] | None = None,
        on_engine: Callable[[object], None] | None = None) -> ReplayResult:
    """Build the engine and replay. Raises RuntimeFailure/IntegrityError from the engine.

    timeline_every_s: the timeline's starting virtual-time cadence (0.0: every step, until
    max_timeline_rows overflow); None: from the workload's horizon (`horizon_s`).
    on_finished: called with every `FinishedRecord` (refused ones too), in finish order
    (the curve's schedule, kvctl/replay/curve/schedule.py); on_engine: called once with
    the engine before the drive (the schedule's refresh probe)."""
    from engine_adapter.embedded import sglang_imports
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
    from engine_adapter.workload import drive

    started = time.monotonic()  # engine build includes the imports, as it did
    torch = sglang_imports.load().torch  # torch and SGLang imported with the gc paused
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        engine = EmbeddedEngine(prepared.config)
        if on_engine is not None:
            on_engine(engine)
        built = time.monotonic()
        if timeline_every_s is None:
            timeline_every_s = for_horizon(horizon_s(prepared.driver), max_timeline_rows)
        loop = _Loop(engine, prepared.driver, max_timeline_rows, timeline_every_s, on_progress,
                     on_finished)
        with stdout_to_stderr():  # one redirect for the loop, not one per allocation call
            steps = drive(engine, prepared.driver, on_step=loop.on_step)
            replayed = time.monotonic()
            final, integrity = _final_integrity(engine, loop)
        loop.finish(steps, final)
    finally:
        torch.set_num_threads(threads)
    rows = loop.timeline.rows()
    wall = replayed - built
    prompt = final.funnel.prompt_tokens
    report = ReplayReport(
        workload=prepared.workload,
        deployment={"gpu": prepared.deployment.gpu, "tp": prepared.deployment.tp,
                    **asdict(prepared.config.cost)},
        settings=prepared.resolved,
        snapshot=final,
        latency=loop.latency.summary(),
        utilization=_utilization(rows, loop.timeline.sample_every_s, loop.peaks),
        integrity=integrity,
        steps=steps,
        notes=prepared.notes,
        rejected=tuple({"rid": r.rid, "prompt_tokens": r.prompt_tokens, "reason": r.rejected}
                       for r in engine.rejections()),
        wall_clock={
            "engine_build_seconds": round(built - started, 3),
            "replay_seconds": round(wall, 3),
            "requests_per_second": (round(final.counters.requests_finished / wall, 3)
                                    if wall else None),
            "prompt_tokens_per_second": round(prompt / wall, 1) if wall else None,
        },
    )
    if on_progress is not None:
        on_progress(loop.progress(steps, final.virtual_time_s))
    return ReplayResult(report=report, timeline=tuple(rows))


def run_replay(settings: ReplaySettings, **kwargs) -> ReplayResult:
    """prepare + run (the sweep workers' entry point)."""
    return run(prepare(settings), **kwargs)


def resolve_config(settings: ReplaySettings, driver) -> tuple[EngineConfig, dict, tuple[str, ...]]:
    """EngineConfig for `settings` on `driver`'s workload, the resolved settings (report
    header) and notes. Raises InputError for an impossible combination."""
    if settings.retention is not None and settings.retention not in RETENTION_CHOICES:
        raise InputError(f"unknown retention {settings.retention!r}; "
                         f"valid: {', '.join(RETENTION_CHOICES)}")
    suggested = dict(getattr(driver, "engine_defaults", None) or {})
    fields = {k: suggested[k] for k in _SCENARIO_FIELDS if k in suggested}
    explicit = {"page_size": settings.page_size, "eviction_policy": settings.eviction_policy,
                "tau_high": settings.tau_high, "token_budget": settings.token_budget,
                "max_running_requests": settings.max_running_requests,
                "max_prefill_tokens": settings.max_prefill_tokens,
                "schedule_policy": settings.schedule_policy,
                "decode_quantum": settings.decode_quantum}
    fields.update({k: v for k, v in explicit.items() if v is not None})
    if settings.retention in ("retain", "drop", "offload"):
        fields["default_retention"] = settings.retention
    page = fields.setdefault("page_size", DEFAULT_PAGE_SIZE)
    summary = getattr(driver, "summary", None)
    notes: list[str] = []
    if summary is not None:
        check_block_pages(settings.workload, summary.block_tokens, page)
        longest = page_ceil(summary.max_request_tokens, page)
        fields["max_context_len"] = max(fields.get("max_context_len", DEFAULT_MAX_CONTEXT), longest)
        if settings.retention is not None:
            notes.append(f"--retention {settings.retention} has no effect on a Mooncake trace: "
                         "every request is a single turn, no session waits on a tool")
    pool_tokens, pool_source = _pool(settings, suggested, page)
    clock = replay_clock(settings.cost_model)
    if clock.step_cost is not None:
        fields["step_cost"] = clock.step_cost
    config = engine_config(
        deployment=settings.deployment,
        pool_tokens=pool_tokens,
        pool_gb=settings.pool_gb if pool_tokens is None else None,
        unbounded_tokens=_demand(driver, page) if pool_tokens == 0 else None,
        tree_core=settings.tree_core, seed=settings.seed or 0,
        exact_batches=settings.exact_batches, decode_jumps=not settings.exact_batches,
        device=settings.device,
        oracle_pages_hint=summary.oracle_pages(page) if summary is not None else 0,
        whatif_rate=0.0,  # no live what-if shadow in a replay: --curve computes the curve
        **fields,
    )
    config, hicache, hicache_notes = apply_hicache(
        config, ratio=settings.hicache_ratio, size_gb=settings.hicache_size,
        write_policy=settings.hicache_write_policy, tp=settings.deployment.tp,
        scenario=getattr(driver, "scenario", None))
    notes.extend(hicache_notes)
    if summary is not None and longest > config.pool_tokens:
        notes.append(f"the pool ({config.pool_tokens:,} tokens) is smaller than the largest "
                     f"request ({summary.max_request_tokens:,} tokens): requests SGLang would "
                     "refuse are refused and listed under `rejected`")
    notes.extend(_deployment_notes(settings.deployment, summary, clock.note))
    resolved = {
        "pool_tokens": config.pool_tokens, "pool_source": pool_source,
        "page_size": config.page_size, "eviction_policy": config.eviction_policy,
        "tree_core": config.tree_core, "retention": settings.retention or "auto",
        "default_retention": config.default_retention, "tau_high": config.tau_high,
        "token_budget": config.token_budget, "chunked_prefill_size": config.token_budget,
        "max_prefill_tokens": config.max_prefill_tokens,
        "schedule_policy": config.schedule_policy,
        "kvctl_mechanisms": kvctl_mechanisms(config, getattr(driver, "scenario", None)),
        "max_running_requests": config.max_running_requests,
        # what a stock server would run when neither the user nor the scenario set it
        "stock_max_running_requests": (
            None if "max_running_requests" in fields
            else sglang_default_max_running(config.pool_tokens, config.max_context_len)),
        "decode_quantum": config.decode_quantum, "exact_batches": config.exact_batches,
        "max_context_len": config.max_context_len, "kv_pool": config.kv_pool,
        "device": config.device,
        "seed": settings.seed if settings.seed is not None else _workload_seed(driver),
        "limit": settings.limit, "label": settings.label, "clock": clock.label,
    }
    if hicache is not None:  # no key without HiCache
        resolved["hicache"] = hicache
    return config, resolved, tuple(notes)


def kvctl_mechanisms(config: EngineConfig, scenario=None) -> list[str]:
    """kvctl's own mechanisms a stock SGLang server lacks that this replay has on (the
    report names each): the tau_high ceiling, tool-wait retention (the engine default or
    a scenario's per-tool policy), the host tier."""
    on = []
    tools = {t.retention for agent in getattr(scenario, "agents", ()) for t in agent.tools}
    if tools - {"drop"}:
        on.append(f"scenario per-tool retention ({', '.join(sorted(tools - {'drop'}))})")
    if config.tau_high is not None:
        on.append(f"tau_high admission ceiling {config.tau_high:g}")
    if config.default_retention == "retain":
        on.append("tool-wait retention (retain)")
    if config.default_retention == "offload" or config.host_capacity_tokens:
        on.append("modeled host tier (offload / reload)")
    return on


def _workload_seed(driver) -> int:
    """The seed a workload runs with when --seed is not given (a scenario file's own)."""
    scenario = getattr(driver, "scenario", None)
    return int(getattr(scenario, "seed", 0) or 0)


def _pool(settings: ReplaySettings, suggested: dict, page: int) -> tuple[int | None, str]:
    if settings.pool_tokens is not None:
        if settings.pool_tokens == 0:
            return 0, "unbounded (--pool-tokens 0: the workload's total demand)"
        return settings.pool_tokens, "--pool-tokens"
    if settings.pool_gb is not None:
        return None, f"--pool-gb {settings.pool_gb:g} for {settings.deployment.model}"
    if suggested.get("pool_tokens") is not None:
        return int(suggested["pool_tokens"]), "scenario engine.pool_tokens"
    deployment = settings.deployment
    return deployment.pool_tokens(page), (
        f"kvctl size: {deployment.model} on {deployment.gpu} x TP{deployment.tp}")


def _demand(driver, page: int) -> int | None:
    summary = getattr(driver, "summary", None)
    if summary is not None:
        return summary.demand_tokens(page)
    demand = getattr(driver, "demand_tokens", None)
    return demand(page) if callable(demand) else demand


def _deployment_notes(deployment: Deployment, summary, clock_note: str | None = None) -> list[str]:
    from kvctl.sizing.models import resolve_model

    notes = [clock_note or f"latencies are modeled: roofline virtual clock for {deployment.model} "
             f"on {deployment.gpu} x TP{deployment.tp} (seed 003 chunked-prefill napkin math)"]
    window = resolve_model(deployment.model).max_context
    if summary is not None and summary.max_request_tokens > window:
        notes.append(f"the longest request ({summary.max_request_tokens:,} tokens) exceeds "
                     f"{deployment.model}'s {window:,}-token window; the replay prices it anyway")
    return notes


def horizon_s(driver) -> float | None:
    """When the workload's last arrival is due, if known before the run: a Mooncake trace's
    last timestamp. A scenario has none (its sessions' later turns wait on drawn tool
    times), so its timeline starts by sampling every step."""
    summary = getattr(driver, "summary", None)
    return getattr(summary, "last_arrival_s", None)


class _Loop:
    """Per-step bookkeeping: latencies from finished records, timeline samples on the
    virtual-time grid, pool peaks at every step, progress."""

    def __init__(self, engine, driver, max_rows: int, every_s: float, on_progress,
                 on_finished=None) -> None:
        self.engine = engine
        self.on_finished = on_finished
        self.driver = driver
        self.timeline = TimelineRecorder(max_rows=max_rows, every_s=every_s)
        self.latency = LatencyCollector()
        self.on_progress = on_progress
        self.finished = 0
        self.steps = 0
        self.hit_rate = 0.0
        self.max_residual = 0
        self.max_delta_protected = 0
        self.samples = 0
        first = engine.snapshot(requests=False)
        self.clock_s = first.virtual_time_s
        self.peaks = PoolPeaks(first.ledger.pool_tokens)
        self.peaks.observe(first.ledger.free_tokens, first.ledger.evictable_tokens,
                          first.virtual_time_s)
        self.timeline.add(row_from(0, first, None))
        engine.merge_check = self.can_merge

    def can_merge(self, before_s: float, after_s: float) -> bool:
        """Whether a step from `before_s` to `after_s` may reach `on_step` merged into the
        report after it: when it would not be sampled (its end state, `StepReport.first`,
        still counts in the peaks and means)."""
        return not self.timeline.would_want(before_s, after_s)

    def on_step(self, report) -> None:
        before = self.steps
        self.steps += report.steps  # a decode jump stands for several steps
        if report.first is not None:  # a step merged into this report: as if reported alone
            clock_s, free, evictable = report.first
            self.peaks.observe(free, evictable, clock_s)
            self.timeline.wants_between(self.clock_s, clock_s)  # False (can_merge said so)
            self.clock_s = clock_s
        for record in report.finished:
            if self.on_finished is not None:
                self.on_finished(record)
            if record.rejected is None:
                self.latency.add(record)
                self.finished += 1
        self.peaks.observe(report.free_tokens, report.evictable_tokens, report.clock_s)
        if self.timeline.wants_between(self.clock_s, report.clock_s):
            self._sample(report)
        self.clock_s = report.clock_s
        if self.on_progress is not None and self.steps // PROGRESS_EVERY_STEPS > before // PROGRESS_EVERY_STEPS:
            self.on_progress(self.progress(self.steps, report.clock_s))

    def _sample(self, report) -> None:
        # The refcount check's derived side walks every lease's root path (the costliest
        # read of a sample): it runs on every REFS_EVERY_SAMPLES-th sample, and per node
        # at the end (_final_integrity); the pool ledger is checked at every sample.
        self.samples += 1
        snap = self.engine.snapshot(requests=False,
                                    reconcile_refs=self.samples % REFS_EVERY_SAMPLES == 0)
        row = row_from(self.steps, snap, report)
        self.timeline.add(row)
        self.hit_rate = row.hit_rate_cumulative
        self.max_residual = max(self.max_residual, abs(row.ledger_residual_tokens))
        delta = abs(snap.refs.delta_protected_tokens or 0)
        self.max_delta_protected = max(self.max_delta_protected, delta)

    def progress(self, steps: int, clock_s: float) -> Progress:
        return Progress(requests_done=self.finished, requests_total=self.driver.total_hint(),
                        virtual_time_s=clock_s, hit_rate=self.hit_rate, steps=steps)

    def finish(self, steps: int, final) -> None:
        row = row_from(steps, final, None)
        self.peaks.observe(final.ledger.free_tokens, final.ledger.evictable_tokens,
                          final.virtual_time_s)
        self.timeline.finish(row)
        self.hit_rate = row.hit_rate_cumulative


def _final_integrity(engine, loop: _Loop):
    """engine.check_integrity() (per-node refs, SGLang's sanity_check when idle) plus the
    worst residual seen in the samples. Returns (final snapshot, Integrity)."""
    problems: list[str] = []
    engine.settle_transfers()  # the acks an idle SGLang scheduler reaps next loop
    try:
        final = engine.check_integrity()
    except IntegrityError as err:
        problems.append(str(err))
        final = engine.snapshot(per_node_refs=True)
    if loop.max_residual:
        problems.append(f"a sampled step had a pool ledger residual of {loop.max_residual} tokens")
    host = final.ledger.host
    if host is not None and host.residual_tokens:
        problems.append(f"SGLang's HiCache host pool holds {host.residual_tokens} tokens "
                        "in no tree node")
    if loop.max_delta_protected:
        problems.append(f"a sampled step had protected tokens off by {loop.max_delta_protected}")
    refs = final.refs
    return final, Integrity(
        ok=not problems,
        pool_residual_tokens=final.ledger.residual_tokens,
        max_sampled_residual_tokens=loop.max_residual,
        delta_protected_tokens=refs.delta_protected_tokens,
        delta_ref_max=refs.delta_ref_max,
        problems=tuple(problems),
    )


def _utilization(rows: list[TimelineRow], every_s: float, peaks: PoolPeaks) -> Utilization:
    """Peaks and time-weighted means over every step (`peaks`, kvctl/replay/peaks.py)."""
    return Utilization(
        peak_kv_utilization=peaks.u_kv,
        mean_kv_utilization=peaks.mean_u_kv,
        peak_token_usage=peaks.token_usage,
        mean_token_usage=peaks.mean_token_usage,
        samples=len(rows),
        sample_every_s=every_s,
    )

"""`plan recommend --validate-with-replay`: the analytic plan beside a replay of it; pure.

Two halves, both plain arithmetic (the replay itself runs in `kvctl.replay.validate`):

- `replay_target` maps a `Recommendation` onto the embedded engine's settings. The
  recommendation is for the user's deployment (say 8 x H100, TP=8); the replay runs one
  replica of it on CPU with a NoOp KV pool sized in tokens, so what carries over is the
  capacity and the scheduling knobs, not the bytes:

      pool        SGLang's pool per device under the recommended --mem-fraction-static,
                  / m_token per device, floored to whole pages (as SGLang sizes it)
      max running the recommended --max-running-requests (per server: one replica replays)
      budget      the engine's step budget counts decode tokens, SGLang's chunk does not:

          one step |<------------ token budget = C + B ------------->|
                   |<---- prefill chunk C ---->|<- B decode tokens ->|

                  so budget = C + B reproduces the recommendation's mixed iteration
                  as the largest step; with fewer than B decoding, prefill takes the
                  rest (the engine has no separate prefill cap)
      host tier   HiCache on: the recommended --hicache-size in tokens, replayed through
                  SGLang's HiCache (or kvctl's host-tier model, `validated_by`); off: 0

- `compare` sets the replay's figures beside the analytic estimates, one row per
  quantity, each with the reason they differ (and whether they are the same quantity).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import fraction, positive
from kvctl.sizing.plan.capacity import CapacityPlan
from kvctl.sizing.plan.recommend import Recommendation
from kvctl.sizing.pool import pool_tokens


@dataclass(frozen=True, kw_only=True)
class ReplayTarget:
    """Engine settings for one replica of the recommended deployment (module docstring)."""

    replicas: int
    pool_tokens: int  # per replica, whole pages
    plan_pool_tokens: int  # the capacity plan's tokens per replica (max running rests on it)
    page_size: int
    eviction_policy: str
    max_running_requests: int  # per replica
    chunked_prefill_size: int
    token_budget: int  # chunk + max running (decode tokens ride in the engine's budget)
    tau_high: float
    hicache_enabled: bool
    host_capacity_tokens: int  # 0: no host tier
    kv_bytes_per_token: int  # m_token, whole model (prices K/V reads and transfers)
    prefill_mfu: float
    mappings: tuple[str, ...]  # one "setting <- source" line each, for the output
    # HICACHE_BY_SGLANG or HICACHE_BY_MODEL (`validated_by`); None: HiCache off
    hicache_validated_by: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReplayedFigures:
    """What the replay measured, as plain numbers (taken from its report and timeline)."""

    requests: int
    prompt_tokens: int
    output_tokens: int
    workload_shared_tokens: int | None  # a scenario's system + tool-schema prefix
    peak_decode_batch: int
    timeline_every_s: float  # 0.0: every step was sampled, so the timeline's peaks are exact
    peak_prefill_tokens_step: int
    admission_deferrals: int
    retractions: int
    evictions: int
    evicted_tokens: int
    peak_kv_utilization: float
    peak_token_usage: float
    hit_rate: float
    itl_p50_s: float | None
    itl_p99_s: float | None
    decode_bandwidth_efficiency: float  # the replay's virtual clock (CostParams)
    step_overhead_s: float


@dataclass(frozen=True, kw_only=True)
class ComparisonRow:
    """One quantity: the analytic estimate, the replayed figure, and why they differ."""

    quantity: str
    analytic: str
    replayed: str
    why: str
    comparable: bool  # False: not the same quantity, shown for orientation only
    analytic_value: float | None
    replayed_value: float | None


def _flag(recommendation: Recommendation, name: str) -> str | None:
    for advice in recommendation.flags:
        if advice.flag == name:
            return advice.value
    return None


def replay_target(
    *, recommendation: Recommendation, plan: CapacityPlan, tau_high: float, prefill_mfu: float
) -> ReplayTarget:
    """The engine settings that replay one replica of `recommendation`; pure.
    Raises InputError when tau_high is outside (0, 1] or the MFU is not positive."""
    fraction("tau_high", tau_high, allow_one=True)
    positive("tau_high", tau_high)
    positive("prefill MFU", prefill_mfu)
    policy = _flag(recommendation, "--radix-eviction-policy")
    if policy is None:
        raise InputError("the recommendation names no --radix-eviction-policy")
    rec = recommendation
    per_device = plan.bytes_per_token_per_device
    running = rec.max_running_requests
    target = ReplayTarget(
        replicas=plan.replicas,
        pool_tokens=pool_tokens(rec.sglang_pool_bytes_per_device, per_device, rec.page_size),
        plan_pool_tokens=plan.tokens_per_replica,
        page_size=rec.page_size,
        eviction_policy=policy,
        max_running_requests=running,
        chunked_prefill_size=rec.chunked_prefill_size,
        token_budget=rec.chunked_prefill_size + running,
        tau_high=tau_high,
        hicache_enabled=rec.hicache_enabled,
        host_capacity_tokens=(rec.hicache_host_bytes_per_device // per_device
                              if rec.hicache_enabled else 0),
        kv_bytes_per_token=plan.bytes_per_token,
        prefill_mfu=prefill_mfu,
        mappings=(),
    )
    return validated_by(target, HICACHE_BY_SGLANG, rec, plan)


# What a replay validates HiCache advice with: SGLang's own HiCache (host pool and cache
# controller, `kvctl replay --hicache-ratio`, docs/hicache.md), unless the workload uses
# kvctl's modeled host tier (offload tool waits), which cannot run beside it: then that model.
HICACHE_BY_SGLANG = "sglang_hicache_replay"
HICACHE_BY_MODEL = "kvctl_model"
HICACHE_VALIDATED_BY_TEXT = {
    HICACHE_BY_SGLANG: "SGLang's HiCache (its host pool and cache controller, replayed on CPU)",
    HICACHE_BY_MODEL: ("kvctl's host-tier model (engine_adapter/embedded/host_tier.py), not "
                       "SGLang's HiCache (the workload's offload tool waits need that model)"),
}


def validated_by(target: ReplayTarget, by: str, rec: Recommendation,
                 plan: CapacityPlan) -> ReplayTarget:
    """`target` whose HiCache advice is validated by `by` (one of HICACHE_VALIDATED_BY_TEXT)."""
    target = replace(target, hicache_validated_by=by if target.hicache_enabled else None)
    return replace(target, mappings=_mappings(target, rec, plan))


def _mappings(t: ReplayTarget, rec: Recommendation, plan: CapacityPlan) -> tuple[str, ...]:
    """One "engine setting <- where it comes from" line per setting."""
    per_replica = f" (per server; {t.replicas} replicas, one replayed)" if t.replicas > 1 else ""
    host = (f"host tier {t.host_capacity_tokens:,} tokens <- --hicache-size "
            f"({rec.hicache_host_bytes_per_device / 1e9:.1f} GB per device); HiCache advice "
            f"validated by {HICACHE_VALIDATED_BY_TEXT[t.hicache_validated_by]}"
            if t.hicache_enabled
            else "host tier 0 tokens <- HiCache off (what an offload tool writes is dropped "
            "at once)")
    return (
        f"pool {t.pool_tokens:,} tokens per replica <- SGLang's KV pool under "
        f"--mem-fraction-static {rec.mem_fraction_static:.3f} "
        f"({rec.sglang_pool_bytes_per_device / 1e9:.2f} GB per device / "
        f"{plan.bytes_per_token_per_device:,} B per token per device, whole pages of "
        f"{t.page_size}); the capacity plan counts {t.plan_pool_tokens:,}",
        f"page size {t.page_size} <- --page-size",
        f"eviction {t.eviction_policy} <- --radix-eviction-policy",
        f"max running {t.max_running_requests} <- --max-running-requests "
        f"{rec.max_running_requests}{per_replica}",
        f"token budget {t.token_budget:,} <- --chunked-prefill-size {t.chunked_prefill_size} + "
        f"{t.max_running_requests} decode tokens (the engine's budget counts decodes, SGLang's "
        "chunk does not; no step outgrows the plan's mixed iteration, and prefill takes what "
        "fewer decodes leave)",
        f"tau_high {t.tau_high:g} <- --tau-high (the engine defers admissions above it)",
        host,
        f"prefill MFU {t.prefill_mfu:g} <- --prefill-mfu; K/V {t.kv_bytes_per_token:,} B per "
        "token <- the plan's m_token (the virtual clock prices K/V reads with it)",
    )


def held_fraction_at(plan: CapacityPlan, pool: int, trajectories: int) -> float:
    """seed 003 eq. (7)-(8): (S_shared + B ((1 - sigma) M + K)) / N_pool on one replica."""
    # without a shared prefix, private = M + K and S_shared = 0: eq. (6)
    return (plan.shared_tokens + trajectories * plan.private_tokens_per_trajectory) / pool


def compare(
    *, recommendation: Recommendation, plan: CapacityPlan, target: ReplayTarget,
    figures: ReplayedFigures,
) -> tuple[ComparisonRow, ...]:
    """One row per quantity (concurrency, KV held, U_KV, hit rate, shape, ITL, retractions)."""
    f = figures
    every = f.timeline_every_s
    exact = "" if every == 0 else f" (sampled every {every:.3g} s of virtual time)"
    return (
        _concurrency(f, target, exact),
        _held(f, plan, target),
        _utilization(f, target),
        _hit_rate(f, plan),
        _shape(f, plan),
        _itl(f, recommendation, target.max_running_requests),
        ComparisonRow(
            quantity="retractions", analytic="0", replayed=f"{f.retractions:,}", comparable=True,
            analytic_value=0, replayed_value=f.retractions,
            why=("none, as planned: no decode step ran out of free pages"
                 if not f.retractions else
                 f"{f.retractions:,} preempted when decode growth found no free "
                 f"page ({f.evictions:,} evictions, {f.evicted_tokens:,} tokens); the plan "
                 "admits only what fits at the planned size"),
        ),
    )


def _held(f: ReplayedFigures, plan: CapacityPlan, target: ReplayTarget) -> ComparisonRow:
    running = target.max_running_requests
    held = held_fraction_at(plan, target.pool_tokens, running)
    planned = (f"{plan.shared_tokens:,} shared + {running} x "
               f"{plan.private_tokens_per_trajectory:,} private tokens (seed 003 eq. 7)"
               if plan.shared_tokens else
               f"{running} x {plan.private_tokens_per_trajectory:,} tokens (seed 003 eq. 6)")
    grew = ("; requests already running grow past tau_high as they decode (the ceiling holds "
            "back only new admissions)" if f.peak_token_usage > target.tau_high else "")
    return ComparisonRow(
        quantity="KV held by running requests", analytic=f"{held:.1%} at {running} running",
        replayed=f"{f.peak_token_usage:.1%} peak token_usage", comparable=True,
        analytic_value=held, replayed_value=f.peak_token_usage,
        why=(f"token_usage (SGLang's: locked and private slots) at the replay's peak of "
             f"{f.peak_decode_batch} requests of the workload's size, against the plan's "
             f"{planned}{grew}"),
    )


def _concurrency(f: ReplayedFigures, target: ReplayTarget, exact: str) -> ComparisonRow:
    running, tau = target.max_running_requests, target.tau_high
    deferred = (f"; {f.admission_deferrals:,} admission deferrals at tau_high"
                if f.admission_deferrals else "")
    if f.peak_decode_batch >= running:
        why = "the --max-running-requests cap was reached" + deferred
    elif f.admission_deferrals:
        why = (f"tau_high held new admissions back before the cap ({f.admission_deferrals:,} "
               f"deferrals): running requests, retained sessions and prefills held up to "
               f"{f.peak_token_usage:.1%} of the pool")
    elif f.peak_token_usage < tau:
        why = (f"the workload offered at most {f.peak_decode_batch} at once: its arrival rate "
               f"(and tool waits), not the pool, bound concurrency (held KV peaked at "
               f"{f.peak_token_usage:.1%}, below tau_high)")
    else:
        why = (f"the pool bound it: held KV peaked at {f.peak_token_usage:.1%}, and free + "
               "evictable slots could not fit the next prefill")
    return ComparisonRow(
        quantity="requests running at once", analytic=f"{running} (max running)",
        replayed=f"{f.peak_decode_batch} peak decode batch{exact}", comparable=True,
        analytic_value=running, replayed_value=f.peak_decode_batch, why=why,
    )


def _utilization(f: ReplayedFigures, target: ReplayTarget) -> ComparisonRow:
    over = f.peak_kv_utilization > target.tau_high
    why = ("U_KV (seed 003 eq. 8) counts evictable cached prefixes too; the ceiling applies "
           "to what cannot be reclaimed (token_usage), so the cache fills the pool past it"
           if over else
           "U_KV stayed at or below tau_high: the pool never filled to the ceiling")
    return ComparisonRow(
        quantity="U_KV peak vs tau_high", analytic=f"<= {target.tau_high:.0%} (admission ceiling)",
        replayed=f"{f.peak_kv_utilization:.1%}", comparable=True,
        analytic_value=target.tau_high, replayed_value=f.peak_kv_utilization, why=why,
    )


def _hit_rate(f: ReplayedFigures, plan: CapacityPlan) -> ComparisonRow:
    sigma = plan.sharing_factor if plan.shared_tokens else 0.0
    own = ("" if f.workload_shared_tokens is None else
           f"; the workload's system + tool-schema prefix is {f.workload_shared_tokens:,} tokens "
           f"(shared within a namespace), the plan assumed {plan.shared_tokens:,} "
           "(--shared-tokens)")
    return ComparisonRow(
        quantity="prefix hit rate", analytic=f"{sigma:.1%} (sigma = S_shared / M)",
        replayed=f"{f.hit_rate:.1%} H_prefix", comparable=False,
        analytic_value=sigma, replayed_value=f.hit_rate,
        why=("not the same quantity: sigma is the cross-trajectory share of one context "
             "(seed 003 eq. 7); H_prefix (eq. 2) also counts each turn reusing its own earlier "
             "turns and forks reusing their parent, and loses what eviction took" + own),
    )


def _shape(f: ReplayedFigures, plan: CapacityPlan) -> ComparisonRow:
    planned = plan.context_tokens + plan.output_tokens
    mean = (f.prompt_tokens + f.output_tokens) / f.requests if f.requests else 0.0
    return ComparisonRow(
        quantity="tokens per request (M + K)", analytic=f"{planned:,}",
        replayed=f"{mean:,.0f} mean",
        comparable=True, analytic_value=planned, replayed_value=mean,
        why=("the workload's own request sizes, not --context/--output; every other row "
             "reads through this difference"),
    )


def _itl(f: ReplayedFigures, recommendation: Recommendation, running: int) -> ComparisonRow:
    planned = recommendation.mixed_iteration_seconds
    chunk = recommendation.chunked_prefill_size
    if f.itl_p99_s is None:
        return ComparisonRow(quantity="ITL at the recommended chunk", analytic=_ms(planned),
                             replayed="-", comparable=False, analytic_value=planned,
                             replayed_value=None, why="no request decoded a second token")
    return ComparisonRow(
        quantity="ITL at the recommended chunk",
        analytic=f"{_ms(planned)} ({chunk} + {running} tokens)",
        replayed=f"{_ms(f.itl_p99_s)} p99 ({_ms(f.itl_p50_s)} p50)", comparable=True,
        analytic_value=planned, replayed_value=f.itl_p99_s,
        why=(f"the analytic figure is a full step ({chunk} prefill + {running} decode tokens); "
             f"the replay's steps carried at most {f.peak_prefill_tokens_step:,} prefill tokens "
             f"and {f.peak_decode_batch} decodes, and its clock streams weights at "
             f"{f.decode_bandwidth_efficiency:.0%} of HBM bandwidth plus each request's K/V, "
             f"+{f.step_overhead_s * 1e3:g} ms per step"),
    )


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.1f} ms"

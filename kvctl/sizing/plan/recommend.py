"""SGLang launch flags from a capacity plan, a retention plan and a latency target.

Each flag comes with the rule that produced it (kvctl's rules, built on the seeds):

    --mem-fraction-static   (weights + KV pool) / HBM, leaving the runtime reserve free;
                            SGLang's rule pool = HBM * f - weights (kvctl.sizing.pool)
    --page-size             largest of 1/16/32/64 whose expected tail, (P - 1) / 2 rows per
                            trajectory (seed 000 0x02G), and expected full-block prefix-hit
                            loss per turn (0x09B staircase) stay within `waste_budget` of the
                            private tokens of a trajectory
    --radix-eviction-policy slru when a prefix is shared by every trajectory (hits promote
                            it to the protected segment; one-off turn tails stay
                            probationary), lru otherwise
    --max-running-requests  trajectories admitted before U_KV reaches tau_high (seed 003)
    --chunked-prefill-size  largest power of two whose mixed iteration (chunk + running
                            decodes) stays within the ITL target (seed 003 napkin math 0.5)
    HiCache                 on when the tool wait exceeds the offload break-even; host pool
                            sized by Little's law for the trajectories parked in tool waits
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvctl.sizing.plan._checks import fraction, positive
from kvctl.sizing.plan.capacity import CapacityPlan
from kvctl.sizing.plan.capacity_workload import AdmissionCeiling
from kvctl.sizing.plan.retention import TierCost
from kvctl.sizing.pool import sglang_budget

PAGE_SIZE_CANDIDATES = (1, 16, 32, 64)
CHUNK_CANDIDATES = tuple(2**k for k in range(6, 15))  # 64 .. 16,384 tokens


@dataclass(frozen=True, kw_only=True)
class FlagAdvice:
    """One launch flag, its value (None: leave the flag off) and the reason."""

    flag: str
    value: str | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """The flags in launch order and the numbers behind them."""

    flags: tuple[FlagAdvice, ...]
    mem_fraction_static: float
    sglang_pool_bytes_per_device: int
    page_size: int
    max_running_requests: int
    chunked_prefill_size: int
    mixed_iteration_seconds: float
    hicache_enabled: bool
    hicache_host_bytes_per_device: int

    @property
    def launch_args(self) -> tuple[str, ...]:
        """The flags as command-line tokens, skipping advice that leaves a flag off."""
        args: list[str] = []
        for advice in self.flags:
            if advice.value == "":
                args.append(advice.flag)
            elif advice.value is not None:
                args.extend((advice.flag, advice.value))
        return tuple(args)


def recommend(
    *,
    plan: CapacityPlan,
    admission: AdmissionCeiling,
    host_tier: TierCost,
    params: float,
    peak_flops_per_device: float,
    weight_stream_seconds: float,
    tool_wait_seconds: float | None,
    generation_seconds: float,
    itl_target_seconds: float = 0.05,
    prefill_mfu: float = 0.6,
    waste_budget: float = 0.01,
    host_budget_bytes: int | None = None,
) -> Recommendation:
    """Derive the flags; pure. Raises InputError on non-positive rates or budgets.

    `tool_wait_seconds` None (the workload's tool wait is unknown) leaves HiCache off and
    says so: the host tier is sized from that wait alone, so kvctl does not invent one.
    """
    positive("params", params)
    positive("peak FLOP/s", peak_flops_per_device)
    positive("ITL target", itl_target_seconds)
    positive("generation seconds", generation_seconds)
    fraction("waste budget", waste_budget)
    split = plan.split
    tp_pp = plan.tp * plan.pp
    # SGLang: pool = HBM * f - weights, so f = (weights + pool) / HBM = (HBM - reserve) / HBM,
    # rounded down to three decimals so the reserve is never smaller than asked.
    mem_fraction = math.floor(1000 * (split.hbm_bytes - split.runtime_bytes) / split.hbm_bytes) / 1000
    budget = sglang_budget(split.hbm_bytes, split.weights_bytes, mem_fraction)

    private = plan.private_tokens_per_trajectory
    page = max(p for p in PAGE_SIZE_CANDIDATES if (p - 1) / 2 <= waste_budget * private)

    # The admission ceiling counts every replica; --max-running-requests is per server.
    deployment = admission.trajectories_shared if plan.shared_tokens else admission.trajectories_unshared
    running = max(deployment // plan.replicas, 1)
    per_token = 2 * params / (tp_pp * peak_flops_per_device * prefill_mfu)  # seconds per token

    def mixed(chunk: int) -> float:
        return max(weight_stream_seconds, (chunk + running) * per_token)

    fitting = [c for c in CHUNK_CANDIDATES if mixed(c) <= itl_target_seconds]
    chunk = max(fitting) if fitting else min(CHUNK_CANDIDATES)

    offload = tool_wait_seconds is not None and tool_wait_seconds > host_tier.break_even_seconds
    parked = (math.ceil(running * tool_wait_seconds / generation_seconds)  # Little: lambda T_wait
              if offload else 0)
    needed_host = parked * private * plan.bytes_per_token_per_device if offload else 0
    host_bytes = needed_host if host_budget_bytes is None else min(needed_host, host_budget_bytes)

    flags = [
        FlagAdvice(flag="--mem-fraction-static", value=f"{mem_fraction:.3f}", reason=(
            f"keeps {split.runtime_bytes / 1e9:.2f} GB per device for activations and CUDA graphs; "
            f"SGLang then gives the KV pool {budget.pool_bytes / 1e9:.2f} GB per device")),
        FlagAdvice(flag="--page-size", value=str(page), reason=(
            f"expected tail and prefix-hit loss of (P-1)/2 = {(page - 1) / 2:g} tokens stay within "
            f"{waste_budget:.0%} of the {private:,} private tokens of a trajectory")),
        FlagAdvice(flag="--radix-eviction-policy", value="slru" if plan.shared_tokens else "lru", reason=(
            f"the {plan.shared_tokens:,}-token shared prefix is hit by every trajectory and earns the "
            "protected segment; one-off turn tails are evicted first" if plan.shared_tokens else
            "no prefix shared across trajectories: recency tracks turn-to-turn reuse")),
        FlagAdvice(flag="--max-running-requests", value=str(running), reason=(
            f"{running} trajectories of {private:,} private tokens fit in one server's pool "
            f"before U_KV reaches tau_high = {admission.tau_high:g}")),
        FlagAdvice(flag="--chunked-prefill-size", value=str(chunk), reason=(
            f"{chunk} prefill + {running} decode tokens take {mixed(chunk) * 1e3:.1f} ms per iteration, "
            f"within the {itl_target_seconds * 1e3:g} ms ITL target" if fitting else
            f"even {chunk} tokens exceed the {itl_target_seconds * 1e3:g} ms ITL target "
            f"({mixed(chunk) * 1e3:.1f} ms); lower the running batch")),
    ]
    if offload:
        ratio = host_bytes / budget.pool_bytes if budget.pool_bytes else 0.0
        flags += [
            FlagAdvice(flag="--enable-hierarchical-cache", value="", reason=(
                f"tool waits of {tool_wait_seconds:g} s exceed the {host_tier.break_even_seconds * 1e3:.0f} ms "
                f"offload break-even over {host_tier.name}")),
            FlagAdvice(flag="--hicache-size", value=str(max(1, math.ceil(host_bytes / 1e9))), reason=(
                f"about {parked} trajectories sit in tool waits at once (Little's law: {running} x "
                f"{tool_wait_seconds:g} s / {generation_seconds:g} s) and need {needed_host / 1e9:.1f} GB "
                f"per device on host" + (
                    f", capped at the {host_budget_bytes / 1e9:g} GB host budget (the rest is recomputed)"
                    if host_bytes < needed_host else "") + f"; {ratio:.2f}x the device pool")),
        ]
    elif tool_wait_seconds is None:
        flags.append(FlagAdvice(flag="--enable-hierarchical-cache", value=None, reason=(
            "not sized: the host tier depends on the tool wait per turn; give "
            "--tool-wait-seconds to size HiCache")))
    else:
        flags.append(FlagAdvice(flag="--enable-hierarchical-cache", value=None, reason=(
            f"tool waits of {tool_wait_seconds:g} s are within the {host_tier.break_even_seconds * 1e3:.0f} ms "
            "break-even: keep the state resident")))
    return Recommendation(
        flags=tuple(flags),
        mem_fraction_static=mem_fraction,
        sglang_pool_bytes_per_device=budget.pool_bytes,
        page_size=page,
        max_running_requests=running,
        chunked_prefill_size=chunk,
        mixed_iteration_seconds=mixed(chunk),
        hicache_enabled=offload,
        hicache_host_bytes_per_device=host_bytes,
    )

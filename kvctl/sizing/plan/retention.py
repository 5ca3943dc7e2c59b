"""Retain, offload, recompute or tier a paused trajectory's KV state (seed 003 sec. 6).

With the seed's simplifications (linear FLOPs only, sustained bandwidths):

    recompute   T_recomp  = 2 P S / R_prefill
    reload      T_reload  = M_KV / B = S m_token / B       (each way)
    round trip  T_rt      = 2 M_KV / B                     (out during the wait, back after)
    break-even  T*        = T_rt * mu_HBM / (mu_HBM - mu_DRAM) + dT_stall

    wait:  0 ........ T* ..................... tier_after ..................>
           retain     offload to host DRAM        tier to NVMe (if it still beats recompute)
    and when reload is slower than recompute, dropping the state and recomputing wins.

The reload/recompute ratio m_token R / (2 P B) does not depend on S, so one T* per link
settles the decision for every context length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import fraction, non_negative, positive


class Decision(str, Enum):
    RETAIN = "retain"
    OFFLOAD = "offload"
    RECOMPUTE = "recompute"
    TIER = "tier"


@dataclass(frozen=True, kw_only=True)
class Tier:
    """A place to park KV state: host DRAM behind an interconnect, or a storage tier.

    `bandwidth_bytes_per_s` is what the whole deployment moves (per-device links times
    devices for host links), sustained, one direction.
    """

    name: str
    storage: bool
    bandwidth_bytes_per_s: float


@dataclass(frozen=True, kw_only=True)
class TierCost:
    """Reload, round trip and break-even through one tier."""

    name: str
    storage: bool
    bandwidth_bytes_per_s: float
    reload_seconds: float
    round_trip_seconds: float
    break_even_seconds: float
    speedup_vs_recompute: float  # T_recomp / T_reload


@dataclass(frozen=True, kw_only=True)
class ToolClass:
    """A tool's wait: the typical (median) wait and, when known, the shortest one."""

    name: str
    typical_wait_seconds: float
    min_wait_seconds: float | None = None


@dataclass(frozen=True, kw_only=True)
class ToolDecision:
    """What to do with the KV state while one tool class runs, and why."""

    tool: str
    decision: Decision
    tier: str | None  # where the state goes for offload / tier
    typical_wait_seconds: float
    decisive_wait_seconds: float  # the wait the decision was made on (the minimum if known)
    hold_cost_byte_seconds: float  # M_KV * typical wait if retained
    resume_seconds: float  # modeled stall on resume
    reason: str


@dataclass(frozen=True, kw_only=True)
class RetentionPlan:
    """The per-link costs and per-tool decisions for one paused context."""

    context_tokens: int
    kv_bytes: int
    params: float
    prefill_flops: float
    recompute_seconds: float
    dram_price_ratio: float  # mu_DRAM / mu_HBM
    stall_seconds: float  # dT_stall
    tier_after_seconds: float
    tiers: tuple[TierCost, ...]
    decisions: tuple[ToolDecision, ...]


def recompute_seconds(*, params: float, tokens: int, prefill_flops: float) -> float:
    """T_recomp = 2 P S / R_prefill (seed 003, linear term only)."""
    return 2 * params * tokens / prefill_flops


def tier_cost(
    tier: Tier, *, kv_bytes: int, recompute: float, dram_price_ratio: float, stall: float
) -> TierCost:
    """Reload, round trip and break-even through `tier` (seed 003, T*_wait)."""
    positive(f"bandwidth of {tier.name}", tier.bandwidth_bytes_per_s)
    reload = kv_bytes / tier.bandwidth_bytes_per_s
    round_trip = 2 * reload
    # T* = T_rt * mu_HBM / (mu_HBM - mu_DRAM) + dT_stall, written with rho = mu_DRAM / mu_HBM
    break_even = round_trip / (1 - dram_price_ratio) + stall
    return TierCost(
        name=tier.name,
        storage=tier.storage,
        bandwidth_bytes_per_s=tier.bandwidth_bytes_per_s,
        reload_seconds=reload,
        round_trip_seconds=round_trip,
        break_even_seconds=break_even,
        speedup_vs_recompute=recompute / reload,
    )


def plan_retention(
    *,
    context_tokens: int,
    bytes_per_token: int,
    params: float,
    prefill_flops: float,
    tiers: Sequence[Tier],
    tools: Sequence[ToolClass] = (),
    dram_price_ratio: float = 0.0,
    stall_seconds: float = 0.0,
    tier_after_seconds: float = 120.0,
) -> RetentionPlan:
    """Price every tier and decide per tool class; pure.

    `tiers[0]` is the primary host tier (offload target); storage tiers are used only
    for waits of at least `tier_after_seconds`. Raises InputError on non-positive sizes,
    a price ratio outside [0, 1), or no host tier.
    """
    positive("context tokens", context_tokens)
    positive("bytes per token", bytes_per_token)
    positive("params", params)
    positive("prefill FLOP/s", prefill_flops)
    fraction("DRAM/HBM shadow price ratio", dram_price_ratio)
    non_negative("stall tolerance", stall_seconds)
    non_negative("tier-after wait", tier_after_seconds)
    kv_bytes = context_tokens * bytes_per_token  # M_KV = S m_token
    recompute = recompute_seconds(params=params, tokens=context_tokens, prefill_flops=prefill_flops)
    costs = tuple(
        tier_cost(
            t, kv_bytes=kv_bytes, recompute=recompute, dram_price_ratio=dram_price_ratio,
            stall=stall_seconds,
        )
        for t in tiers
    )
    hosts = [c for c in costs if not c.storage]
    if not hosts:
        raise InputError("retention needs at least one host-memory tier")
    storage = [c for c in costs if c.storage]
    decisions = tuple(
        _decide(tool, kv_bytes, recompute, hosts[0], storage, tier_after_seconds)
        for tool in tools
    )
    return RetentionPlan(
        context_tokens=context_tokens,
        kv_bytes=kv_bytes,
        params=params,
        prefill_flops=prefill_flops,
        recompute_seconds=recompute,
        dram_price_ratio=dram_price_ratio,
        stall_seconds=stall_seconds,
        tier_after_seconds=tier_after_seconds,
        tiers=costs,
        decisions=decisions,
    )


def _decide(
    tool: ToolClass,
    kv_bytes: int,
    recompute: float,
    host: TierCost,
    storage: list[TierCost],
    tier_after: float,
) -> ToolDecision:
    positive(f"typical wait of {tool.name}", tool.typical_wait_seconds)
    if tool.min_wait_seconds is not None:
        non_negative(f"min wait of {tool.name}", tool.min_wait_seconds)
        if tool.min_wait_seconds > tool.typical_wait_seconds:
            raise InputError(f"min wait of {tool.name} exceeds its typical wait")
    # Offload must finish its round trip inside the wait: decide on the shortest wait.
    wait = tool.typical_wait_seconds if tool.min_wait_seconds is None else tool.min_wait_seconds
    hold = kv_bytes * tool.typical_wait_seconds

    def decided(decision: Decision, tier: str | None, resume: float, reason: str) -> ToolDecision:
        return ToolDecision(
            tool=tool.name, decision=decision, tier=tier,
            typical_wait_seconds=tool.typical_wait_seconds, decisive_wait_seconds=wait,
            hold_cost_byte_seconds=hold, resume_seconds=resume, reason=reason,
        )

    if wait <= host.break_even_seconds:
        return decided(
            Decision.RETAIN, None, 0.0,
            f"wait {wait:g} s <= break-even {host.break_even_seconds * 1e3:.0f} ms on "
            f"{host.name}: the round trip would not pay for itself",
        )
    if host.reload_seconds >= recompute:
        return decided(
            Decision.RECOMPUTE, None, recompute,
            f"reload over {host.name} ({host.reload_seconds:.3g} s) is no faster than "
            f"recompute ({recompute:.3g} s): drop the state",
        )
    fitting = [
        s for s in storage
        if wait >= tier_after and s.round_trip_seconds < wait and s.reload_seconds < recompute
    ]
    if fitting:
        best = min(fitting, key=lambda s: s.reload_seconds)
        return decided(
            Decision.TIER, best.name, best.reload_seconds,
            f"wait {wait:g} s >= {tier_after:g} s: park on {best.name}; reload "
            f"{best.reload_seconds:.3g} s still beats recompute {recompute:.3g} s",
        )
    return decided(
        Decision.OFFLOAD, host.name, host.reload_seconds,
        f"wait {wait:g} s > break-even {host.break_even_seconds * 1e3:.0f} ms; reload "
        f"{host.reload_seconds * 1e3:.0f} ms is {host.speedup_vs_recompute:.1f}x faster "
        f"than recompute",
    )

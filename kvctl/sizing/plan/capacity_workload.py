"""Workload effects on a capacity plan: demand, branching, tool waits, admission ceiling.

All four read a `CapacityPlan` (seed 003 eq. 6-7) and never change it:

- demand for a target concurrency B, eq. (6) without sharing and eq. (7) with it, plus
  the headroom the allocator keeps free;
- branching: one root context forks b branches that share it copy-on-write, each adding
  S_gen private tokens: M_branching = M_root + sum_b S_gen,b * m_token;
- tool-wait inflation by Little's law, N = lambda * W, with W = T_gen + T_wait when the
  state stays resident through the tool wait and W = T_gen when it is offloaded;
- the admission ceiling tau_high: new turns queue once U_KV = used / capacity > tau_high.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvctl.sizing.plan._checks import fraction, non_negative, positive
from kvctl.sizing.plan.capacity import CapacityPlan, floor_fraction


@dataclass(frozen=True, kw_only=True)
class Demand:
    """KV bytes B trajectories need, whole deployment (seed 003 eq. 6-7)."""

    trajectories: int
    unshared_bytes: int  # B (M + K) m_token
    shared_bytes: int  # (S_shared * replicas + B ((1 - sigma) M + K)) m_token + headroom
    headroom_bytes: int
    pool_bytes: int
    fits_unshared: bool
    fits_shared: bool


@dataclass(frozen=True, kw_only=True)
class Branching:
    """One forked task: a root context and b branches of S_gen private tokens each."""

    branches: int
    branch_tokens: int
    task_tokens: int  # M_root + b S_gen (root shared copy-on-write)
    task_bytes: int  # M_branching
    task_tokens_without_sharing: int  # b (M_root + S_gen): every branch copies the root
    max_tasks: int
    max_tasks_without_sharing: int


@dataclass(frozen=True, kw_only=True)
class ToolWaitConcurrency:
    """Little's law residency with retention on versus off."""

    arrival_rate_per_s: float  # lambda
    generation_seconds: float  # T_generation
    tool_wait_seconds: float  # T_tool_wait
    resident_retained: float  # lambda (T_gen + T_wait)
    resident_offloaded: float  # lambda T_gen
    inflation: float  # (T_gen + T_wait) / T_gen
    ceiling: int  # trajectories the plan holds (shared when a prefix is shared)
    fits_retained: bool
    fits_offloaded: bool


@dataclass(frozen=True, kw_only=True)
class AdmissionCeiling:
    """Where admission stops: U_KV > tau_high (seed 003 sec. 7, tau_high ~ 0.85-0.90)."""

    tau_high: float
    ceiling_tokens_per_replica: int
    trajectories_unshared: int
    trajectories_shared: int


def demand(plan: CapacityPlan, *, trajectories: int) -> Demand:
    """Bytes B trajectories need without and with sharing; pure."""
    non_negative("trajectories", trajectories)
    m = plan.bytes_per_token
    pool = plan.split.node_kv_pool_bytes
    headroom = floor_fraction(plan.headroom, pool)
    unshared = trajectories * plan.tokens_per_trajectory_unshared * m  # eq. (6)
    shared_tokens = plan.shared_tokens * plan.replicas + trajectories * plan.private_tokens_per_trajectory
    shared = shared_tokens * m + headroom  # eq. (7)
    return Demand(
        trajectories=trajectories,
        unshared_bytes=unshared,
        shared_bytes=shared,
        headroom_bytes=headroom,
        pool_bytes=pool,
        fits_unshared=trajectories <= plan.max_trajectories_unshared,
        fits_shared=trajectories <= plan.max_trajectories_shared,
    )


def branching(plan: CapacityPlan, *, branches: int, branch_tokens: int) -> Branching:
    """Tasks of one root plus `branches` forks that fit; pure."""
    positive("branches", branches)
    positive("branch tokens", branch_tokens)
    root = plan.context_tokens
    task = root + branches * branch_tokens  # M_root + sum_b S_gen,b
    copied = branches * (root + branch_tokens)
    private_root = root - plan.shared_tokens
    room = plan.usable_tokens_per_replica - plan.shared_tokens
    per_replica = room // (private_root + branches * branch_tokens)
    return Branching(
        branches=branches,
        branch_tokens=branch_tokens,
        task_tokens=task,
        task_bytes=task * plan.bytes_per_token,
        task_tokens_without_sharing=copied,
        max_tasks=plan.replicas * per_replica,
        max_tasks_without_sharing=plan.replicas * (plan.usable_tokens_per_replica // copied),
    )


def tool_wait_concurrency(
    plan: CapacityPlan, *, arrival_rate: float, generation_seconds: float, tool_wait_seconds: float
) -> ToolWaitConcurrency:
    """Little's law N = lambda W with and without residency through tool waits; pure."""
    positive("arrival rate", arrival_rate)
    positive("generation seconds", generation_seconds)
    non_negative("tool wait seconds", tool_wait_seconds)
    retained = arrival_rate * (generation_seconds + tool_wait_seconds)
    offloaded = arrival_rate * generation_seconds
    ceiling = plan.max_trajectories_shared if plan.shared_tokens else plan.max_trajectories_unshared
    return ToolWaitConcurrency(
        arrival_rate_per_s=arrival_rate,
        generation_seconds=generation_seconds,
        tool_wait_seconds=tool_wait_seconds,
        resident_retained=retained,
        resident_offloaded=offloaded,
        inflation=(generation_seconds + tool_wait_seconds) / generation_seconds,
        ceiling=ceiling,
        fits_retained=retained <= ceiling,
        fits_offloaded=offloaded <= ceiling,
    )


def admission_ceiling(plan: CapacityPlan, *, tau_high: float) -> AdmissionCeiling:
    """Tokens and trajectories admitted before U_KV crosses tau_high; pure."""
    fraction("tau_high", tau_high, allow_one=True)
    ceiling = floor_fraction(tau_high, plan.tokens_per_replica)
    shared_room = max(ceiling - plan.shared_tokens, 0)
    return AdmissionCeiling(
        tau_high=tau_high,
        ceiling_tokens_per_replica=ceiling,
        trajectories_unshared=plan.replicas * (ceiling // plan.tokens_per_trajectory_unshared),
        trajectories_shared=plan.replicas * (shared_room // plan.private_tokens_per_trajectory),
    )

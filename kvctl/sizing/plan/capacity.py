"""How many agent trajectories a deployment holds (seed 003 eq. 3-7, napkin math 0.7).

Per device (eq. 3-5):  KV pool = HBM - weights - (activations + runtime)
Per replica (TP x PP devices), in tokens:

    capacity  = floor(KV pool per device / m_token per device)
    usable    = floor((1 - headroom) * capacity)
    |<------------------------ capacity ------------------------>|
    |<-------------------- usable --------------------->|headroom|
    |S_shared|<- B * ((1 - sigma) M + K) private rows ->|        |

    unshared (eq. 6): B = floor(usable / (M + K))
    shared   (eq. 7): B = floor((usable - S_shared) / ((1 - sigma) M + K))

Each replica holds its own copy of the shared prefix. sigma defaults to S_shared / M, the
reading of napkin math 0.7 (24,576 shared of 32,768 context tokens leaves 8,192 private).
Branching, tool-wait inflation and the admission ceiling live in `capacity_workload`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import fraction, non_negative, positive
from kvctl.sizing.pool import concurrent_trajectories, pool_tokens, reserve_budget

_FLOOR_GUARD = 1e-9  # (1 - 0.1) * n may land a hair under an integer it equals


@dataclass(frozen=True, kw_only=True)
class HbmSplit:
    """Per-device HBM split (seed 003 eq. 3-5), bytes."""

    hbm_bytes: int
    weights_bytes: int
    runtime_bytes: int  # activations + runtime reserve
    kv_pool_bytes: int
    devices: int
    node_kv_pool_bytes: int


@dataclass(frozen=True, kw_only=True)
class CapacityPlan:
    """Token capacity and trajectory ceilings for one workload shape."""

    split: HbmSplit
    tp: int
    pp: int
    replicas: int
    bytes_per_token: int  # m_token, whole model
    bytes_per_token_per_device: int  # what one device of a replica stores per token
    tokens_per_replica: int
    capacity_tokens: int
    headroom: float
    usable_tokens_per_replica: int
    context_tokens: int  # M_avg
    output_tokens: int  # K_avg
    shared_tokens: int  # S_shared
    sharing_factor: float  # sigma
    tokens_per_trajectory_unshared: int  # M + K
    private_tokens_per_trajectory: int  # (1 - sigma) M + K
    max_trajectories_unshared: int
    max_trajectories_shared: int
    shared_gain: float | None  # shared / unshared, None when unshared is 0


def hbm_split(
    *, hbm_bytes: int, weights_bytes: int, runtime_bytes: int, devices: int
) -> HbmSplit:
    """Seed 003 eq. (5) per device (`kvctl.sizing.pool.reserve_budget`), times `devices`.

    Raises InputError when nothing is left for KV or `devices` is not positive.
    """
    positive("devices", devices)
    budget = reserve_budget(hbm_bytes, weights_bytes, runtime_bytes)
    return HbmSplit(
        hbm_bytes=budget.hbm_bytes,
        weights_bytes=budget.weights_bytes,
        runtime_bytes=budget.runtime_bytes,
        kv_pool_bytes=budget.pool_bytes,
        devices=devices,
        node_kv_pool_bytes=devices * budget.pool_bytes,
    )


def floor_fraction(share: float, count: int) -> int:
    """floor(share * count), immune to 0.9 * n landing just below an integer."""
    return math.floor(share * count + _FLOOR_GUARD)


def plan_capacity(
    *,
    split: HbmSplit,
    bytes_per_token: int,
    bytes_per_token_per_device: int,
    tp: int = 1,
    pp: int = 1,
    headroom: float = 0.10,
    context_tokens: int,
    output_tokens: int,
    shared_tokens: int = 0,
    sharing_factor: float | None = None,
) -> CapacityPlan:
    """Trajectory ceilings without and with prefix sharing; pure.

    Raises InputError when devices are not a multiple of TP x PP, headroom is outside
    [0, 1), the shared prefix exceeds the context, or not even the shared prefix fits.
    """
    positive("TP", tp)
    positive("PP", pp)
    positive("bytes per token", bytes_per_token)
    positive("bytes per token per device", bytes_per_token_per_device)
    fraction("headroom", headroom)
    positive("context tokens", context_tokens)
    non_negative("output tokens", output_tokens)
    non_negative("shared tokens", shared_tokens)
    if split.devices % (tp * pp):
        raise InputError(f"{split.devices} devices are not a multiple of TP x PP = {tp * pp}")
    if shared_tokens > context_tokens:
        raise InputError(f"shared tokens {shared_tokens} exceed context {context_tokens}")
    replicas = split.devices // (tp * pp)
    tokens_per_replica = pool_tokens(split.kv_pool_bytes, bytes_per_token_per_device)
    usable = math.floor(tokens_per_replica * (1 - headroom))  # as pool.concurrent_trajectories
    unshared_tokens = context_tokens + output_tokens  # seed 003 eq. (6): M + K
    if sharing_factor is None:
        sigma = shared_tokens / context_tokens
        private = context_tokens - shared_tokens + output_tokens  # exact (1 - sigma) M + K
    else:
        fraction("sharing factor", sharing_factor)
        sigma = sharing_factor
        private = math.ceil((1 - sigma) * context_tokens - _FLOOR_GUARD) + output_tokens
    if private == 0:
        raise InputError("each trajectory adds no private tokens; give --output or less sharing")
    per_replica_unshared = concurrent_trajectories(
        tokens_per_replica, unshared_tokens, headroom_fraction=headroom
    )
    # seed 003 eq. (7): S_shared held once per replica, each trajectory adds its private rows
    per_replica_shared = concurrent_trajectories(
        tokens_per_replica, private, shared_prefix_tokens=shared_tokens, headroom_fraction=headroom
    )
    unshared = replicas * per_replica_unshared
    shared = replicas * per_replica_shared
    return CapacityPlan(
        split=split,
        tp=tp,
        pp=pp,
        replicas=replicas,
        bytes_per_token=bytes_per_token,
        bytes_per_token_per_device=bytes_per_token_per_device,
        tokens_per_replica=tokens_per_replica,
        capacity_tokens=replicas * tokens_per_replica,
        headroom=headroom,
        usable_tokens_per_replica=usable,
        context_tokens=context_tokens,
        output_tokens=output_tokens,
        shared_tokens=shared_tokens,
        sharing_factor=sigma,
        tokens_per_trajectory_unshared=unshared_tokens,
        private_tokens_per_trajectory=private,
        max_trajectories_unshared=unshared,
        max_trajectories_shared=shared,
        shared_gain=(shared / unshared) if unshared else None,
    )

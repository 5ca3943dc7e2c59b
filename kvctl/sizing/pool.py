"""How much of one GPU's memory becomes KV pool, and how many tokens/pages/trajectories fit.

Two budget rules, both per rank:

1. Seed 003 eq. (3)-(5): the pool is what the weights and the runtime leave.

       M_weights = N_params * b_weight / (TP * PP)                        eq. (4)
       M_KV      = C_HBM - (M_weights + M_activations + M_runtime)        eq. (5)

   kvctl folds activations and runtime into one `reserve_bytes`.

2. SGLang 0.5.23 (`_profile_available_bytes` in srt/mem_cache/kv_cache_configurator.py):
   `mem_fraction_static` is the share of the pre-load free memory that weights plus KV may
   use; the rest is slack for activations and CUDA graphs.

       rest = free_after_load - pre_load * (1 - mem_fraction_static)     (GiB floats)
       pool_bytes = int(rest * 2**30)

   with pre_load = the GPU's free memory before the weights load (kvctl takes the full
   capacity; a real process shows ~0.5-1 GiB less once the CUDA context exists) and
   free_after_load = pre_load - weights.

Tokens, as DefaultPoolConfigurator.calculate_pool_sizes (srt/model_executor/
pool_configurator.py) computes them:

       tokens = max(pool_bytes - overhead, 0) // cell_size // page_size * page_size
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kvctl.errors import InputError
from kvctl.sizing.dtypes import dtype_bits
from kvctl.util.units import GIB

_GIB_FLOAT = float(1 << 30)


@dataclass(frozen=True, kw_only=True)
class PoolBudget:
    """One rank's memory split. Bytes throughout; `pool_bytes` is what the KV pool gets.

    `runtime_bytes` is the reserve (rule "reserve") or SGLang's non-static slack
    pre_load * (1 - mem_fraction_static) (rule "mem_fraction_static").
    """

    rule: Literal["reserve", "mem_fraction_static"]
    hbm_bytes: int
    weights_bytes: int
    runtime_bytes: int
    mem_fraction_static: float | None
    pool_bytes: int


class NoPoolError(InputError):
    """The weights and the reserve (or SGLang's slack) leave nothing for the KV pool.

    A sizing question with an answer ("it does not fit"), so `kvctl size` reports it rather
    than failing; the plan commands still treat it as bad input.
    """


def weights_per_rank(num_params: int, weight_dtype: str, tp: int = 1, pp: int = 1) -> int:
    """Seed 003 eq. (4): N_params * b_weight / (TP * PP), rounded up to whole bytes."""
    _positive("num_params", num_params)
    _positive("tp", tp)
    _positive("pp", pp)
    return math.ceil(num_params * dtype_bits(weight_dtype) / (8 * tp * pp))


def reserve_budget(hbm_bytes: int, weights_bytes: int, reserve_bytes: int) -> PoolBudget:
    """Seed 003 eq. (5) on one rank. InputError when nothing is left for the KV pool."""
    _positive("HBM capacity", hbm_bytes)
    _non_negative("weights", weights_bytes)
    _non_negative("runtime reserve", reserve_bytes)
    pool = hbm_bytes - weights_bytes - reserve_bytes
    if pool <= 0:
        raise NoPoolError(
            f"weights ({weights_bytes / GIB:.2f} GiB/GPU) and runtime reserve "
            f"({reserve_bytes / GIB:.2f} GiB/GPU) leave no KV pool on a "
            f"{hbm_bytes / GIB:.2f} GiB GPU; raise --tp/--pp or use a larger GPU"
        )
    return PoolBudget(
        rule="reserve",
        hbm_bytes=hbm_bytes,
        weights_bytes=weights_bytes,
        runtime_bytes=reserve_bytes,
        mem_fraction_static=None,
        pool_bytes=pool,
    )


def sglang_budget(
    hbm_bytes: int,
    weights_bytes: int,
    mem_fraction_static: float,
    pre_load_bytes: int | None = None,
) -> PoolBudget:
    """SGLang's mem_fraction_static rule on one rank (module docstring, rule 2).

    `pre_load_bytes` defaults to the full capacity. InputError when the fraction is not in
    (0, 1] or leaves nothing for KV (naming SGLang's minimum viable fraction).
    """
    _positive("HBM capacity", hbm_bytes)
    _non_negative("weights", weights_bytes)
    if not 0.0 < mem_fraction_static <= 1.0:
        raise InputError(f"--mem-fraction must be in (0, 1], got {mem_fraction_static}")
    pre_load = hbm_bytes if pre_load_bytes is None else pre_load_bytes
    _positive("pre-load free memory", pre_load)
    free_after_load = pre_load - weights_bytes
    # SGLang works in GiB floats: get_available_gpu_memory() returns free / (1 << 30).
    available_gib = free_after_load / _GIB_FLOAT
    slack_gib = pre_load / _GIB_FLOAT * (1 - mem_fraction_static)
    rest_gib = available_gib - slack_gib
    if rest_gib <= 0:
        minimum = 1 - available_gib / (pre_load / _GIB_FLOAT)
        raise NoPoolError(
            f"weights leave no KV pool under mem_fraction_static={mem_fraction_static}; "
            f"SGLang needs more than {minimum:.4f} on this GPU"
        )
    return PoolBudget(
        rule="mem_fraction_static",
        hbm_bytes=hbm_bytes,
        weights_bytes=weights_bytes,
        runtime_bytes=int(slack_gib * _GIB_FLOAT),
        mem_fraction_static=mem_fraction_static,
        pool_bytes=int(rest_gib * _GIB_FLOAT),
    )


def pool_tokens(
    pool_bytes: int, cell_bytes: int, page_size: int = 1, overhead_bytes: int = 0
) -> int:
    """Token slots of the pool, page-aligned down (SGLang's calculate_pool_sizes)."""
    _non_negative("pool", pool_bytes)
    _positive("bytes per token", cell_bytes)
    _positive("page size", page_size)
    _non_negative("overhead", overhead_bytes)
    return max(pool_bytes - overhead_bytes, 0) // cell_bytes // page_size * page_size


def pool_pages(pool_bytes: int, cell_bytes: int, page_size: int, overhead_bytes: int = 0) -> int:
    """Whole pages of `page_size` tokens the pool holds (seed 003 eq. (8)'s N_total_blocks)."""
    return pool_tokens(pool_bytes, cell_bytes, page_size, overhead_bytes) // page_size


def max_trajectories(pool_bytes: int, trajectory_bytes: int) -> int:
    """Seed 003 napkin math 0.1: B_max = floor(M_KV / M_seq)."""
    _non_negative("pool", pool_bytes)
    _positive("trajectory footprint", trajectory_bytes)
    return pool_bytes // trajectory_bytes


def concurrent_trajectories(
    capacity_tokens: int,
    private_tokens: int,
    *,
    shared_prefix_tokens: int = 0,
    headroom_fraction: float = 0.0,
) -> int:
    """Trajectories that fit when a shared prefix is stored once (seed 003 eq. (6)/(7)).

        usable = floor(capacity * (1 - headroom))
        B      = floor((usable - S_shared) / private)      private = unique context + output

    Napkin math 0.7: capacity 1,416,015 tokens, 10% headroom, private 34,816 -> 36; with a
    24,576-token shared prefix and 10,240 private tokens -> 122. InputError when the shared
    prefix alone does not fit.
    """
    _non_negative("capacity", capacity_tokens)
    _positive("private tokens per trajectory", private_tokens)
    _non_negative("shared prefix tokens", shared_prefix_tokens)
    if not 0.0 <= headroom_fraction < 1.0:
        raise InputError(f"headroom must be in [0, 1), got {headroom_fraction}")
    usable = math.floor(capacity_tokens * (1 - headroom_fraction))
    if shared_prefix_tokens > usable:
        raise InputError(
            f"shared prefix of {shared_prefix_tokens:,} tokens exceeds the usable pool "
            f"of {usable:,} tokens"
        )
    return (usable - shared_prefix_tokens) // private_tokens


def _positive(label: str, value: int) -> None:
    if isinstance(value, bool) or value <= 0:
        raise InputError(f"{label} must be positive, got {value}")


def _non_negative(label: str, value: int) -> None:
    if isinstance(value, bool) or value < 0:
        raise InputError(f"{label} must not be negative, got {value}")

"""The smallest TP x PP at which a model's KV pool holds a trajectory, for "does not fit" verdicts.

When the weights and the reserve fill a GPU, `kvctl size` still answers: it shows the bytes
per token and the geometry, says the model does not fit, and names the smallest split that
does. "Fits" means the same as in the report: the budget leaves a positive pool and at least
one trajectory of the longest requested context fits the usable pool (after headroom).

Candidates are ordered by GPU count (TP * PP), then by less pipeline parallelism (TP first,
since TP also splits the KV heads); TP must be a split the geometry allows
(`ModelGeometry.kv_heads_per_rank`), PP at most the layer count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing.budget import trajectories_with_headroom
from kvctl.sizing.geometry import ModelGeometry
from kvctl.sizing.pool import NoPoolError, PoolBudget

MAX_SEARCH_GPUS = 64
_TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, kw_only=True)
class FitSuggestion:
    """The smallest split found: TP, PP, the GPUs it takes and the trajectories it then holds."""

    tp: int
    pp: int
    gpus: int
    max_trajectories: int
    context: int


def smallest_fit(
    model: ModelGeometry,
    *,
    kv_dtype: str,
    context: int,
    headroom: float,
    budget_for: Callable[[int, int], PoolBudget],
    max_gpus: int = MAX_SEARCH_GPUS,
    max_pp: int | None = None,
) -> FitSuggestion | None:
    """The first (TP, PP) by GPU count whose pool holds one `context`-token trajectory.

    `budget_for(tp, pp)` returns that split's per-device PoolBudget or raises NoPoolError.
    `max_pp` bounds PP (1: tensor parallelism alone). None when nothing up to `max_gpus`
    GPUs fits.
    """
    pp_limit = min(model.num_layers, max_pp or max_gpus)
    candidates = sorted(
        ((tp, pp) for tp in _TP_CANDIDATES for pp in range(1, max_gpus + 1)
         if tp * pp <= max_gpus and pp <= pp_limit),
        key=lambda split: (split[0] * split[1], split[1]),
    )
    for tp, pp in candidates:
        try:
            model.kv_heads_per_rank(tp)
            budget = budget_for(tp, pp)
        except NoPoolError:
            continue
        except InputError:  # this TP does not divide the heads
            continue
        row = model.bytes_per_token(kv_dtype, tp, pp)
        trajectory = model.trajectory_bytes(context, kv_dtype, tp, pp)
        fit = trajectories_with_headroom(budget.pool_bytes, row, trajectory, headroom)
        if fit >= 1:
            return FitSuggestion(tp=tp, pp=pp, gpus=tp * pp, max_trajectories=fit, context=context)
    return None

"""Fit a step-cost model (engine_adapter/embedded/step_cost.py) to measured scheduler steps.

    fit_from_samples(samples) -> StepCostModel      raises InputError when it cannot

Least squares with non-negative coefficients, on *relative* error: each row of the design
matrix and the target is divided by the measured step time, so a 5 ms decode step weighs as
much as a 500 ms prefill (an absolute fit would price the rare long prefills well and every
decode step badly; the replay's TTFT and ITL are made of both). Non-negativity is exact: with
six terms every support subset is solved by `numpy.linalg.lstsq` and the best feasible one
kept (the NNLS optimum is the unconstrained optimum on its support).

Refusals, one line each: fewer than MIN_SAMPLES samples, fewer than MIN_PER_PART steps with
prefill work or with decode work (their terms would be guesses), a design matrix whose
columns are not independent (names the terms the traffic did not vary), non-finite times.
Pure: numpy only, no I/O.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import numpy as np

from engine_adapter.embedded.step_cost import TERMS, FitQuality, StepCostModel, features
from engine_adapter.step_samples import StepSample
from kvctl.errors import InputError

MIN_SAMPLES = 20
MIN_PER_PART = 5
TRAFFIC_HINT = "send traffic with varied prompt lengths and concurrency while calibrating"


def design(samples: Sequence[StepSample]) -> tuple[np.ndarray, np.ndarray]:
    """(X, y): one row of `features` per sample, the measured step seconds."""
    x = np.array([features(s.shape) for s in samples], dtype=np.float64).reshape(-1, len(TERMS))
    y = np.array([s.wall_s for s in samples], dtype=np.float64)
    return x, y


def fit_from_samples(samples: Sequence[StepSample], *, source: str = "") -> StepCostModel:
    """The step-cost model minimizing relative squared error, coefficients >= 0; its `fit`
    says how well it explains `samples`. InputError when the samples cannot determine it."""
    _check_counts(samples)
    x, y = design(samples)
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise InputError("degenerate fit: a step sample has a non-positive or non-finite time")
    _check_rank(x)
    weighted_x, weighted_y = x / y[:, None], np.ones_like(y)
    coefficients = nonnegative_lstsq(weighted_x, weighted_y)
    return StepCostModel(coefficients=tuple(float(c) for c in coefficients), source=source,
                         fit=quality(samples, coefficients))


def nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||x c - y|| subject to c >= 0, by enumerating supports (few columns only).
    Columns are scaled to unit maximum first so that seconds-per-pair and seconds-per-step
    live on one numeric scale."""
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    columns = x.shape[1]
    best, best_residual = np.zeros(columns), float(np.dot(y, y))
    for size in range(1, columns + 1):
        for support in itertools.combinations(range(columns), size):
            solution, *_ = np.linalg.lstsq(xs[:, support], y, rcond=None)
            if np.any(solution < 0):
                continue
            residual = y - xs[:, support] @ solution
            value = float(np.dot(residual, residual))
            if value < best_residual - 1e-15:
                best_residual = value
                best = np.zeros(columns)
                best[list(support)] = solution
    return best / scale


def quality(samples: Sequence[StepSample], coefficients: np.ndarray) -> FitQuality:
    """R^2 on the step times themselves, relative errors |predicted - measured| / measured."""
    x, y = design(samples)
    predicted = x @ np.asarray(coefficients)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - predicted) ** 2)) / total if total > 0 else 0.0
    relative = np.abs(predicted - y) / y
    kinds = np.array([s.kind for s in samples])
    by_kind = Counter(s.kind for s in samples)
    return FitQuality(
        samples=len(samples), by_kind=dict(sorted(by_kind.items())), r2=r2,
        median_rel_error=float(np.median(relative)),
        p90_rel_error=float(np.percentile(relative, 90)),
        median_rel_error_by_kind={k: float(np.median(relative[kinds == k]))
                                  for k in sorted(by_kind)},
    )


def _check_counts(samples: Sequence[StepSample]) -> None:
    if len(samples) < MIN_SAMPLES:
        raise InputError(f"too few step samples: {len(samples)}, need at least {MIN_SAMPLES}; "
                         f"{TRAFFIC_HINT} (or give a longer --duration)")
    prefill = sum(1 for s in samples if s.extend_tokens > 0)
    decode = sum(1 for s in samples if s.decode_requests > 0)
    for count, part in ((prefill, "prefill"), (decode, "decode")):
        if count < MIN_PER_PART:
            raise InputError(f"too few steps with {part} work: {count} of {len(samples)} "
                             f"samples, need at least {MIN_PER_PART}; {TRAFFIC_HINT}")


def _check_rank(x: np.ndarray) -> None:
    """Every term must vary independently of the others in these samples."""
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    rank = np.linalg.matrix_rank(xs)
    if rank == x.shape[1]:
        return
    tied = [TERMS[j] for j in range(x.shape[1])
            if np.linalg.matrix_rank(np.delete(xs, j, axis=1)) == rank]
    raise InputError(f"degenerate fit: the samples do not vary {', '.join(tied)} independently "
                     f"(rank {rank} of {x.shape[1]}); {TRAFFIC_HINT}")

"""Fit a step-cost model (engine_adapter/embedded/step_cost.py) to measured scheduler steps.

    fit_from_samples(samples) -> StepCostModel      raises InputError when it cannot

Least squares with non-negative coefficients, on *relative* error: each row of the design
matrix and the target is divided by the measured step time, so a 5 ms decode step weighs as
much as a 500 ms prefill (an absolute fit would price the rare long prefills well and every
decode step badly; the replay's TTFT and ITL are made of both).

Subject to conserving time: the fitted durations of the steps with prefill work sum to their
measured total, and those of the decode-only steps to theirs (`conserved_parts`). A relative
fit alone is biased low in absolute time: step times on a busy host are skewed to the right
(another process takes the core for a while), a relative criterion counts a step 3x slower
than usual as one bounded error, and the slow steps' time is lost. Measured on bench_twin's
CPU server (100 requests, 20x, 711 steps): the unconstrained fit priced the prefill steps at
0.85x and the decode steps at 0.95x their measured total, and the replay, whose TTFT under
load is the queue of every earlier step, predicted TTFT 0.88-0.96x; the busier the host, the
lower. The measured steps themselves cover the drive (their sum is the plugin's span to 0.3%),
so the time lost was the fit's, not the timer's.

Non-negativity is exact: with six terms every support subset is solved (least squares with
the equality constraints, by its KKT system) and the best feasible one kept (the optimum of
the constrained problem is the equality-constrained optimum on its support). When no support
meets both parts' totals, the one total over all steps is conserved instead (always feasible).

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
    """The step-cost model minimizing relative squared error, coefficients >= 0, each part's
    measured time conserved (module docstring); its `fit` says how well it explains
    `samples`. InputError when the samples cannot determine it."""
    _check_counts(samples)
    x, y = design(samples)
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise InputError("degenerate fit: a step sample has a non-positive or non-finite time")
    _check_rank(x)
    weighted_x, weighted_y = x / y[:, None], np.ones_like(y)
    parts = conserved_parts(samples)
    totals = (np.array([x[part].sum(axis=0) for part in parts]),
              np.array([y[part].sum() for part in parts]))
    coefficients = nonnegative_lstsq(weighted_x, weighted_y, conserve=totals)
    if coefficients is None:  # no support meets every part's total: conserve the sum of all
        coefficients = nonnegative_lstsq(weighted_x, weighted_y,
                                         conserve=(x.sum(axis=0)[None, :], np.array([y.sum()])))
    return StepCostModel(coefficients=tuple(float(c) for c in coefficients), source=source,
                         fit=quality(samples, coefficients))


def conserved_parts(samples: Sequence[StepSample]) -> list[np.ndarray]:
    """Boolean masks of the parts whose measured total time the fit conserves: the steps with
    prefill work (prefill and mixed), the decode-only steps; an empty part is left out."""
    prefill = np.array([s.extend_tokens > 0 for s in samples], dtype=bool)
    return [part for part in (prefill, ~prefill) if part.any()]


def nonnegative_lstsq(x: np.ndarray, y: np.ndarray,
                      conserve: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray | None:
    """argmin ||x c - y|| subject to c >= 0 and, with `conserve = (a, b)`, a c = b (one row per
    conserved total), by enumerating supports (few columns only); None when no support meets
    `a c = b` with c >= 0. Columns are scaled to unit maximum first so that seconds-per-pair
    and seconds-per-step live on one numeric scale (the constraint rows to unit total)."""
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    if conserve is not None:
        a, b = conserve
        a, b = a / scale / b[:, None], np.ones_like(b)
    columns = x.shape[1]
    best, best_residual = (np.zeros(columns), float(np.dot(y, y)))
    if conserve is not None:  # c = 0 meets no total: a support must
        best, best_residual = None, np.inf
    for size in range(1, columns + 1):
        for support in itertools.combinations(range(columns), size):
            solution = (np.linalg.lstsq(xs[:, support], y, rcond=None)[0] if conserve is None
                        else _constrained(xs[:, support], y, a[:, support], b))
            if solution is None or np.any(solution < 0):
                continue
            residual = y - xs[:, support] @ solution
            value = float(np.dot(residual, residual))
            if value < best_residual - 1e-15:
                best_residual = value
                best = np.zeros(columns)
                best[list(support)] = solution
    return None if best is None else best / scale


def _constrained(x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """argmin ||x c - y|| subject to a c = b (its KKT system); None when the support cannot
    meet the constraints or the system is singular."""
    n, k = x.shape[1], a.shape[0]
    kkt = np.zeros((n + k, n + k))
    kkt[:n, :n], kkt[:n, n:], kkt[n:, :n] = x.T @ x, a.T, a
    try:
        solution = np.linalg.solve(kkt, np.concatenate([x.T @ y, b]))[:n]
    except np.linalg.LinAlgError:
        return None
    return solution if np.allclose(a @ solution, b, rtol=1e-9, atol=1e-12) else None


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
        measured_s=float(y.sum()), fitted_s=float(predicted.sum()),
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

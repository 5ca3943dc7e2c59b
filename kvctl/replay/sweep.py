"""Sweeps: the same workload under a grid of settings, one engine per run, ranked.

    --sweep eviction=lru,lfu,slru --sweep pool-tokens=200000,400000
        -> 6 runs: (lru, 200000), (lru, 400000), (lfu, 200000), ...

Runs go to worker processes (`--parallel N`, spawn context: each worker imports SGLang and
builds its own engine, since SGLang's runtime context is process-wide), or to a Ray
cluster (`--executor ray`, kvctl.replay.ray_executor). Every grid point is validated in
the parent first (`runner.prepare`), so an unknown policy or an impossible pool fails
before any run starts. Each executor hands back one `RunOutcome` per grid point, in grid
order; the ranking is by hit rate (higher first), then evictions, retractions and modeled
p99 TTFT (lower first); failed runs (Ray only: a run lost twice) rank last.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kvctl.errors import InputError
from kvctl.replay.runner import ReplayResult, ReplaySettings, prepare, run_replay

# CLI key -> (ReplaySettings field, value parser)
SWEEP_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    "eviction": ("eviction_policy", str),
    "pool-tokens": ("pool_tokens", int),
    "pool-gb": ("pool_gb", float),
    "page-size": ("page_size", int),
    "retention": ("retention", str),
    "tau-high": ("tau_high", float),
    "tree-core": ("tree_core", str),
    "token-budget": ("token_budget", int),
    "chunked-prefill-size": ("token_budget", int),
    "max-prefill-tokens": ("max_prefill_tokens", int),
    "schedule-policy": ("schedule_policy", str),
    "max-running": ("max_running_requests", int),
    "decode-quantum": ("decode_quantum", int),
    "hicache-ratio": ("hicache_ratio", lambda v: None if v == "off" else float(v)),
    "hicache-write-policy": ("hicache_write_policy", str),
}
POOL_KEYS = ("pool-tokens", "pool-gb")


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One run in the comparison table."""

    rank: int
    label: str
    params: dict
    pool_tokens: int
    hit_rate: float | None  # None (and the counts below) when the run failed
    evictions: int | None
    evicted_tokens: int | None
    retractions: int | None
    ttft_p99_s: float | None
    peak_kv_utilization: float | None
    attempts: int = 1
    retried_after: str | None = None  # why the first attempt was lost, when it was retried
    failure: str | None = None  # why the run has no result


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """What an executor hands back for one grid point: the result, or why there is none.

    attempts: how many times the run was started (2 after a lost worker or node);
    retried_after: the first attempt's failure when it was retried; failure: the last
    attempt's failure when `result` is None.
    """

    result: ReplayResult | None
    attempts: int = 1
    retried_after: str | None = None
    failure: str | None = None


def parse_sweeps(options: Sequence[str],
                 extra: dict[str, Callable[[str], object]] | None = None) -> dict[str, list[str]]:
    """`["eviction=lru,lfu", "pool-tokens=1,2"]` -> {"eviction": [...], ...}, in order.
    Raises InputError for an unknown key, a repeated key, an empty or unparsable value.
    extra: more keys and their checkers (a fleet sweep's replicas and router), each raising
    InputError (or ValueError) on a bad value."""
    keys = {k: parser for k, (_field, parser) in SWEEP_KEYS.items()} | dict(extra or {})
    axes: dict[str, list[str]] = {}
    for option in options:
        key, sep, values = option.partition("=")
        key = key.strip().replace("_", "-")
        if not sep or key not in keys:
            raise InputError(f"--sweep {option!r}: expected KEY=V1,V2 with KEY one of "
                             f"{', '.join(keys)}")
        if key in axes:
            raise InputError(f"--sweep {key} given twice; list all its values in one option")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise InputError(f"--sweep {key}: no values")
        parser = keys[key]
        for item in items:
            try:
                parser(item)
            except ValueError:
                raise InputError(
                    f"--sweep {key}: {item!r} is not a valid {parser.__name__}") from None
        axes[key] = items
    if sum(k in axes for k in POOL_KEYS) > 1:
        raise InputError("sweep pool-tokens or pool-gb, not both")
    return axes


def grid(base: ReplaySettings, axes: dict[str, list[str]]) -> list[ReplaySettings]:
    """Cartesian product of the axes (first axis varies slowest), each with a label."""
    keys = list(axes)
    runs = []
    for values in itertools.product(*(axes[k] for k in keys)):
        changes = {SWEEP_KEYS[k][0]: SWEEP_KEYS[k][1](v) for k, v in zip(keys, values)}
        if "pool-tokens" in keys:
            changes["pool_gb"] = None
        if "pool-gb" in keys:
            changes["pool_tokens"] = None
        label = " ".join(f"{k}={v}" for k, v in zip(keys, values))
        runs.append(replace(base, label=label, **changes))
    return runs


def slug(label: str) -> str:
    """A directory name for a run label:
    'eviction=lru pool-tokens=2' -> 'eviction-lru_pool-tokens-2'."""
    text = label.replace("=", "-").replace(" ", "_")
    return re.sub(r"[^A-Za-z0-9._-]", "", text) or "run"


def validate(runs: Sequence[ReplaySettings]) -> list[int]:
    """Prepare every grid point (validates inputs, sizes pools); builds no engine.
    Returns each run's pool size in tokens (a Ray task's memory estimate needs it)."""
    pools = []
    for settings in runs:
        try:
            pools.append(prepare(settings).config.pool_tokens)
        except InputError as err:
            raise InputError(f"sweep run {settings.label!r}: {err}") from None
    return pools


def run_sweep(runs: Sequence[ReplaySettings], *, parallel: int = 1,
              on_done: Callable[[int, RunOutcome], None] | None = None) -> list[RunOutcome]:
    """Run every grid point here; outcomes in grid order. `on_done(index, outcome)` as each
    ends. A failing run raises (and so ends the sweep) as a single replay would."""
    if parallel < 1:
        raise InputError(f"--parallel must be positive, got {parallel}")
    results: list[RunOutcome | None] = [None] * len(runs)
    if parallel == 1 or len(runs) == 1:
        for index, settings in enumerate(runs):
            results[index] = RunOutcome(result=run_replay(settings))
            if on_done:
                on_done(index, results[index])
        return results  # type: ignore[return-value]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(parallel, len(runs)), mp_context=context) as pool:
        futures = {pool.submit(run_replay, settings): index for index, settings in enumerate(runs)}
        for future in as_completed(futures):
            index = futures[future]
            results[index] = RunOutcome(result=future.result())
            if on_done:
                on_done(index, results[index])
    return results  # type: ignore[return-value]


def rank(runs: Sequence[ReplaySettings], outcomes: Sequence[RunOutcome]) -> list[SweepRow]:
    """The comparison table, best first."""
    rows = []
    for settings, outcome in zip(runs, outcomes):
        marks = {"attempts": outcome.attempts, "retried_after": outcome.retried_after,
                 "failure": outcome.failure}
        if outcome.result is None:
            rows.append(SweepRow(
                rank=0, label=settings.label, params=_params(settings.label),
                pool_tokens=outcome_pool(settings), hit_rate=None, evictions=None,
                evicted_tokens=None, retractions=None, ttft_p99_s=None,
                peak_kv_utilization=None, **marks))
            continue
        doc = outcome.result.report.to_dict()
        rows.append(SweepRow(
            rank=0, label=settings.label, params=_params(settings.label),
            pool_tokens=doc["settings"]["pool_tokens"], hit_rate=doc["hit_rate"],
            evictions=doc["evictions"], evicted_tokens=doc["evicted_tokens"],
            retractions=doc["retractions"], ttft_p99_s=doc["modeled_latency"]["ttft_s"]["p99"],
            peak_kv_utilization=doc["peak_kv_utilization"], **marks,
        ))
    return ranked(rows)


def outcome_pool(settings: ReplaySettings) -> int:
    """A failed run's pool in tokens, as validation sized it (the table still shows it)."""
    return prepare(settings).config.pool_tokens


def ranked(rows: Sequence[SweepRow]) -> list[SweepRow]:
    """Best first: higher hit rate, then fewer evictions, fewer retractions, lower modeled
    p99 TTFT, then the label (a total order, so ties rank the same way every time).
    Failed runs (no hit rate) come last, by label."""
    def key(r: SweepRow):
        if r.hit_rate is None:
            return (1, 0.0, 0, 0, 0.0, r.label)
        ttft = r.ttft_p99_s if r.ttft_p99_s is not None else float("inf")
        return (0, -r.hit_rate, r.evictions, r.retractions, ttft, r.label)

    return [replace(row, rank=i + 1) for i, row in enumerate(sorted(rows, key=key))]


def _params(label: str) -> dict:
    return dict(part.split("=", 1) for part in label.split(" ") if "=" in part)


def hit_vs_pool_points(rows: Sequence[SweepRow]) -> list[tuple[str, int, float]]:
    """(series label without the pool axis, pool tokens, hit rate) for the sweep plot;
    empty unless the sweep varied the pool."""
    if len({r.pool_tokens for r in rows}) < 2:
        return []
    points = []
    for row in rows:
        if row.hit_rate is None:
            continue
        rest = " ".join(f"{k}={v}" for k, v in row.params.items() if k not in POOL_KEYS)
        points.append((rest or "pool only", row.pool_tokens, row.hit_rate))
    return points


def sweep_document(axes: dict[str, list[str]], rows: Sequence[SweepRow],
                   outcomes: Sequence[RunOutcome], runs: Sequence[ReplaySettings]) -> dict:
    """The sweep's JSON: the axes, the ranked table, and every run's full report in grid
    order (a failed run: its label, attempts and failure instead of a report)."""
    from dataclasses import asdict

    reports = []
    for settings, outcome in zip(runs, outcomes):
        if outcome.result is not None:
            reports.append(outcome.result.report.to_dict())
        else:
            reports.append({"label": settings.label, "attempts": outcome.attempts,
                            "failure": outcome.failure})
    return {
        "sweep": {k: list(v) for k, v in axes.items()},
        "ranking": [asdict(r) for r in rows],
        "runs": reports,
    }


def without_wall_clock(document: dict) -> dict:
    """A sweep document less what differs between two runs of the same grid and seed: each
    run report's `wall_clock` block (engine build and replay seconds, requests and prompt
    tokens per second). Everything else is the same whichever executor ran the grid."""
    from kvctl.replay.report import WALL_CLOCK_KEY

    runs = [{k: v for k, v in run.items() if k != WALL_CLOCK_KEY} for run in document["runs"]]
    return {**document, "runs": runs}

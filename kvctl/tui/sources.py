"""Build the snapshot source `kvctl monitor` watches (validated up front, built lazily).

Each builder checks its input at once (a missing file or bad YAML is an InputError before
any UI starts) and returns a zero-argument factory; the app calls it in a worker thread,
because the embedded engine imports SGLang (seconds, the first time).

    scenario  -> LiveRun(EmbeddedEngine, scenario driver; loops with the next seed)
    trace     -> LiveRun(EmbeddedEngine, kvctl.replay.workloads.open_workload; runs once)
                 (a scenario file given to --trace works too: open_workload reads both)
    url       -> engine_adapter.remote.remote_engine.RemoteEngine (read-only)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine_adapter.protocol import SnapshotSource
from kvctl.errors import InputError

DEFAULT_SCENARIO = (
    Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "coding-agents.yaml"
)
TRACE_POOL_TOKENS = 262_144  # NoOp pool: slots cost no memory (same default as the exporter)
TRACE_MAX_CONTEXT = 32_768  # raised to the trace's longest request
TREE_INTERVAL_S = 1.0  # per-node reads walk the whole tree: about once a second


@dataclass(frozen=True, kw_only=True)
class SourcePlan:
    """What to watch: a label for the status line and a factory for the source."""

    label: str
    build: Callable[[], SnapshotSource]
    read_only: bool


def scenario_source(
    path: Path,
    *,
    seed: int | None,
    pace: float | None,
    pool_tokens: int | None,
    snapshot_interval_s: float,
) -> SourcePlan:
    from kvctl.replay.scenario import load_scenario

    if not path.is_file():
        raise InputError(f"--scenario {path}: no such file")
    first = load_scenario(path, seed=seed)  # parses and validates now (InputError)
    base_seed = first.scenario.seed if seed is None else seed
    defaults = dict(first.engine_defaults)

    def drivers(iteration: int):
        return first if iteration == 0 else load_scenario(path, seed=base_seed + iteration)

    def build() -> SnapshotSource:
        return _live_run(
            defaults,
            drivers,
            pool_tokens=pool_tokens,
            pace=pace,
            loop=True,
            snapshot_interval_s=snapshot_interval_s,
        )

    return SourcePlan(
        label=f"{path.name} (scenario, seed {base_seed})", build=build, read_only=False
    )


def trace_source(
    path: Path,
    *,
    seed: int | None,
    pace: float | None,
    pool_tokens: int | None,
    snapshot_interval_s: float,
) -> SourcePlan:
    if not path.is_file():
        raise InputError(f"--trace {path}: no such file")
    try:
        from kvctl.replay.workloads import open_workload
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith("kvctl.replay.workloads"):
            raise InputError(
                "--trace needs kvctl.replay.workloads, which this checkout does not "
                "have yet; use --scenario FILE"
            ) from None
        raise
    first = open_workload(path, seed=seed or 0, limit=None)  # validates the whole file now
    defaults = dict(getattr(first, "engine_defaults", None) or {})
    defaults.setdefault("pool_tokens", TRACE_POOL_TOKENS)
    summary = getattr(first, "summary", None)
    longest = summary.max_request_tokens if summary is not None else 0
    defaults.setdefault("max_context_len", max(TRACE_MAX_CONTEXT, longest))

    def build() -> SnapshotSource:
        # a trace's request ids and arrival times do not restart on a warm engine: run once
        return _live_run(
            defaults,
            lambda iteration: first,
            pool_tokens=pool_tokens,
            pace=pace,
            loop=False,
            snapshot_interval_s=snapshot_interval_s,
        )

    return SourcePlan(label=f"{path.name} (trace)", build=build, read_only=False)


def remote_source(url: str, *, kv_events: str | None) -> SourcePlan:
    try:
        from engine_adapter.remote.http_fetch import normalize_base_url
        from engine_adapter.remote.remote_engine import RemoteEngine
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith("engine_adapter.remote"):
            raise InputError(
                "--url needs engine_adapter.remote, which this checkout lacks"
            ) from None
        raise
    base = normalize_base_url(url)  # InputError for a malformed URL

    def build() -> SnapshotSource:
        return RemoteEngine(base, kv_events=kv_events)

    return SourcePlan(label=f"{base} (remote, read-only)", build=build, read_only=True)


def _live_run(
    defaults: dict,
    drivers,
    *,
    pool_tokens: int | None,
    pace: float | None,
    loop: bool,
    snapshot_interval_s: float,
):
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.live import LiveRun
    from kvctl.replay.engine_setup import engine_config

    overrides = dict(defaults)
    pool = overrides.pop("pool_tokens", None)
    engine = EmbeddedEngine(engine_config(pool_tokens=pool_tokens or pool, **overrides))
    return LiveRun(
        engine,
        drivers,
        pace=pace,
        loop=loop,
        snapshot_interval_s=snapshot_interval_s,
        tree_interval_s=TREE_INTERVAL_S,
    ).start()

"""Open a replay input by its file name: a Mooncake trace (.jsonl) or a scenario (.yaml).

Both come back as a `WorkloadDriver` (engine_adapter.workload) with an `engine_defaults`
dict: EngineConfig fields the workload suggests (a scenario's `engine:` block; empty for a
trace). A Mooncake driver also carries `summary` (a `TraceSummary` from one validating pass
over the file), which sizes an unbounded pool and rejects an impossible one before any
engine is built.
"""

from __future__ import annotations

from pathlib import Path

from kvctl.errors import InputError
from kvctl.replay.mooncake import MooncakeDriver, scan_trace

TRACE_SUFFIXES = (".jsonl",)
SCENARIO_SUFFIXES = (".yaml", ".yml")


def open_workload(path: str | Path, *, seed: int | None = None, limit: int | None = None):
    """A fresh driver for `path`. Raises InputError for a missing file, an unknown suffix,
    or any malformed content (naming the file and the line or field)."""
    path = Path(path)
    if limit is not None and limit <= 0:
        raise InputError(f"--limit must be positive, got {limit}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in TRACE_SUFFIXES:
        summary = scan_trace(path, limit=limit)
        return MooncakeDriver(path, limit=limit, summary=summary)
    if suffix in SCENARIO_SUFFIXES:
        return _scenario(path, seed=seed, limit=limit)
    raise InputError(
        f"{path}: unknown workload type {suffix or '(no suffix)'!r}; expected a Mooncake "
        f"trace ({', '.join(TRACE_SUFFIXES)}) or a scenario ({', '.join(SCENARIO_SUFFIXES)})"
    )


def _scenario(path: Path, *, seed: int | None, limit: int | None):
    try:
        from kvctl.replay.scenario import load_scenario
    except ImportError as err:
        raise InputError(
            f"{path}: scenario files are not supported by this build ({err})") from None
    driver = load_scenario(path, seed=seed, limit=limit)
    if not hasattr(driver, "engine_defaults"):
        driver.engine_defaults = {}
    return driver

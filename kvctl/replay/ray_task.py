"""The worker side of a Ray sweep: one grid point, replayed from input bytes, not a path.

A Ray worker may run on a node that has no copy of the driver's files, so the driver puts
the trace or scenario file in Ray's object store once and every task gets its bytes:

    driver: data = Path(workload).read_bytes(); ref = ray.put(data)
    task:   <private temp dir>/<workload's file name>  <- data      (same name, same suffix)
            prepare(settings with that path) -> run -> ReplayResult
            report.workload["path"] := the driver's path             (as a local run reports it)

The file name is kept so that the workload's name (a trace's file name) and its type (by
suffix) are the ones a local run sees; the path in the report is the driver's, so the
report is the one a local run of the same settings writes. Nothing here imports Ray: the
executor wraps `replay_point` in a Ray task (kvctl.replay.ray_executor).

The task is a generator, so the driver learns when a run starts (it shows runs as running
only once a worker has them): it yields a `Started` first, then the `ReplayResult`. The
result's `wall_clock` block (what may differ between two runs of the same settings) also
names the Ray node that ran it (`ray_node_id`), so a sweep's report.json files say where
each run went.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from kvctl.replay.runner import ReplayResult, ReplaySettings, prepare, run


@dataclass(frozen=True, kw_only=True)
class Started:
    """A worker took the run: which process, on which host (for a failure's reason)."""

    pid: int
    host: str


def replay_point(settings: ReplaySettings, data: bytes) -> Iterator[Started | ReplayResult]:
    """Replay `settings` with its workload read from `data` (the file's bytes); yields
    Started, then the ReplayResult. Raises what `prepare`/`run` raise. Writes only a
    private temp directory, removed before returning. Runs inside a Ray worker (Ray is
    imported there only)."""
    import ray

    yield Started(pid=os.getpid(), host=os.uname().nodename)
    result = replay_bytes(settings, data)
    result.report.wall_clock["ray_node_id"] = ray.get_runtime_context().get_node_id()
    yield result


def replay_bytes(settings: ReplaySettings, data: bytes) -> ReplayResult:
    """The replay of `settings` over a workload given as bytes (see the module docstring)."""
    original = settings.workload
    scratch = tempfile.mkdtemp(prefix="kvctl-ray-")
    try:
        local = Path(scratch) / Path(original).name
        local.write_bytes(data)
        prepared = prepare(replace(settings, workload=str(local)))
        prepared = replace(prepared, workload={**prepared.workload, "path": str(original)})
        return run(prepared)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

"""One sweep grid, run by the local executor and by the Ray executor, timed end to end.

Runs the same `kvctl replay ... --sweep ... --parallel N --json` twice as a fresh `kvctl`
process: once with the local executor (N spawned worker processes), once with
`--executor ray` (a local Ray instance with N CPUs, started and stopped by kvctl), and
prints both wall times (process start to exit, Ray's start-up included), their ratio, and
whether the two sweep documents are equal less each run's wall_clock block.

    .venv/bin/python benchmarks/bench_sweep_ray.py [--limit N] [--parallel N]
        [--sweep eviction=lru,lfu --sweep pool-tokens=40000,80000]

The Ray instance binds loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) and sends no usage
stats. Speed is reported, never enforced.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TRACE = REPO / "examples" / "traces" / "mooncake" / "head_500.jsonl"
LOOPBACK_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def timed_sweep(args: argparse.Namespace, *extra: str) -> tuple[float, dict]:
    command = [sys.executable, "-m", "kvctl", "replay", str(TRACE), "--limit", str(args.limit),
               "--parallel", str(args.parallel), "--json", *extra]
    for axis in args.sweep:
        command += ["--sweep", axis]
    env = {**os.environ, **LOOPBACK_RAY_ENV, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(extra) or 'local'} sweep failed: {proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--sweep", action="append")
    args = parser.parse_args()
    args.sweep = args.sweep or ["eviction=lru,lfu", "pool-tokens=40000,80000"]
    from kvctl.replay.sweep import without_wall_clock

    local_s, local_doc = timed_sweep(args)
    ray_s, ray_doc = timed_sweep(args, "--executor", "ray")
    runs = len(local_doc["runs"])
    print(f"grid: {' x '.join(args.sweep)} = {runs} runs, {TRACE.name} --limit {args.limit}, "
          f"--parallel {args.parallel}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"local executor   {local_s:8.1f} s wall")
    print(f"ray executor     {ray_s:8.1f} s wall (local Ray instance, start and stop included)")
    print(f"ray / local      {ray_s / local_s:8.2f}")
    same = without_wall_clock(local_doc) == without_wall_clock(ray_doc)
    print(f"sweep documents equal less wall_clock: {same}")


if __name__ == "__main__":
    main()

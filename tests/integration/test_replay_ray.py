"""`kvctl replay --sweep --executor ray` on a real two-node Ray cluster on loopback.

The cluster is Ray's own `ray.cluster_utils.Cluster`: a head node and a second node, each a
real raylet with its own object store (80 MiB) and one CPU, no dashboard, bound to
127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray take the loopback address as the
node's address instead of the machine's outward one; usage stats are off). It is started
once for this module and always shut down. Every grid point is a real replay through
SGLang's radix cache in a Ray worker process. Nothing here is mocked.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app
from support.signals import sigint_default

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEAD = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl")
GRID = ("--sweep", "eviction=lru,lfu", "--sweep", "pool-tokens=40000,80000")
LOOPBACK_RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
NODE = dict(num_cpus=1, object_store_memory=80 << 20, node_ip_address="127.0.0.1")


def sweep_cli(cwd: Path, *extra: str):
    """The 4-point sweep over the first 8 requests, written to `cwd`/sweep (a relative --out,
    so that two runs print the same 'wrote' line)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        return CliRunner().invoke(app, ["replay", HEAD, "--limit", "8", *GRID,
                                        "--out", "sweep", *extra])


def comparable(path: Path) -> str:
    from kvctl.replay.sweep import without_wall_clock

    return json.dumps(without_wall_clock(json.loads(path.read_text())), sort_keys=True)


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """The same grid with the local executor (in this process): (stdout, sweep.json path)."""
    cwd = tmp_path_factory.mktemp("local")
    result = sweep_cli(cwd)
    assert result.exit_code == 0, result.output
    return result.stdout, cwd / "sweep" / "sweep.json"


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node on loopback: yields (Cluster, the second node)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in LOOPBACK_RAY_ENV.items():
            patch.setenv(key, value)
        from ray.cluster_utils import Cluster

        ray_cluster = Cluster(initialize_head=True,
                              head_node_args={**NODE, "include_dashboard": False})
        try:
            worker = ray_cluster.add_node(**NODE)
            ray_cluster.wait_for_nodes()
            yield ray_cluster, worker
        finally:
            ray_cluster.shutdown()


def test_two_node_cluster_sweep_equals_local(cluster, local_sweep, tmp_path):
    """The 4-point grid as Ray tasks on two nodes (one CPU each, so at most one task per
    node at a time) ran on both nodes: the runs' reports name the head's and the second
    node's ids. It prints the local executor's ranked table byte for byte, and its
    sweep.json, per-run reports and timelines are the local ones less each report's
    wall_clock block."""
    ray_cluster, worker = cluster
    result = sweep_cli(tmp_path, "--executor", "ray", "--ray-address", ray_cluster.address)
    assert result.exit_code == 0, result.output
    local_stdout, local_json = local_sweep
    assert result.stdout == local_stdout
    assert comparable(tmp_path / "sweep" / "sweep.json") == comparable(local_json)
    for run in ("eviction-lru_pool-tokens-40000", "eviction-lfu_pool-tokens-80000"):
        ours, theirs = tmp_path / "sweep" / run, local_json.parent / run
        assert (ours / "timeline.csv").read_bytes() == (theirs / "timeline.csv").read_bytes()
        assert comparable_report(ours) == comparable_report(theirs)
    ran_on = [json.loads(path.read_text())["wall_clock"]["ray_node_id"]
              for path in sorted((tmp_path / "sweep").glob("*/report.json"))]
    assert len(ran_on) == 4
    assert set(ran_on) == {ray_cluster.head_node.node_id, worker.node_id}


def comparable_report(run_dir: Path) -> dict:
    return {k: v for k, v in json.loads((run_dir / "report.json").read_text()).items()
            if k != "wall_clock"}


def test_worker_node_killed_mid_sweep_retries_the_lost_run(cluster, local_sweep):
    """The second node is removed (all its processes killed) once both nodes run a task:
    the run it held is retried once on the head, every run lands with the local executor's
    figures, and the table marks the retried run. Runs last in this module: it leaves the
    cluster with the head only."""
    from kvctl.cli.replay import _sweep_table
    from kvctl.replay.ray_executor import run_sweep_ray
    from kvctl.replay.runner import ReplaySettings
    from kvctl.replay.sweep import grid, parse_sweeps, rank, validate

    ray_cluster, worker = cluster
    runs = grid(ReplaySettings(workload=HEAD, limit=8), parse_sweeps(GRID[1::2]))
    killed = []

    def on_update(state) -> None:
        if state.running == 2 and not killed:
            ray_cluster.remove_node(worker, allow_graceful=False)
            killed.append(state)

    outcomes = run_sweep_ray(runs, validate(runs), address=ray_cluster.address,
                             on_update=on_update)
    assert killed, "the second node never ran a task"
    assert all(o.result is not None for o in outcomes)
    retried = [(run.label, o) for run, o in zip(runs, outcomes) if o.attempts > 1]
    assert len(retried) == 1
    assert retried[0][1].retried_after in ("worker node lost", "worker process lost")
    rows = rank(runs, outcomes)
    local = json.loads(local_sweep[1].read_text())["ranking"]
    marks = ("attempts", "retried_after")
    assert [{k: v for k, v in vars(r).items() if k not in marks} for r in rows] == \
           [{k: v for k, v in r.items() if k not in marks} for r in local]
    import io

    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    console.print(_sweep_table(rows, "head_500.jsonl"))
    text = console.export_text()
    label = retried[0][0].replace("eviction=", "").replace(" pool-tokens=", " / ")
    marked = [line for line in text.splitlines() if "retried after:" in line]
    assert len(marked) == 1 and label in marked[0]


def test_run_lost_twice_is_reported_failed_and_the_other_lands(cluster):
    """Three replay worker processes are SIGKILLed as they start, over a 2-run grid (at most
    4 attempts): one run is lost twice and reported failed with its reason, the other lands
    on its second attempt (marked retried), whichever order Ray picks."""
    import psutil

    from kvctl.replay.ray_executor import run_sweep_ray
    from kvctl.replay.runner import ReplaySettings
    from kvctl.replay.sweep import grid, parse_sweeps, rank, validate

    ray_cluster, _ = cluster
    runs = grid(ReplaySettings(workload=HEAD, limit=8, pool_tokens=40000),
                parse_sweeps(["eviction=lru,lfu"]))
    kills = []

    def on_update(state) -> None:
        for worker in _tree(psutil.Process()):
            if len(kills) < 3 and "ray::kvctl-replay" in " ".join(_cmdline(worker)):
                if worker.pid not in kills:
                    worker.kill()
                    kills.append(worker.pid)

    outcomes = run_sweep_ray(runs, validate(runs), address=ray_cluster.address,
                             on_update=on_update)
    assert len(kills) == 3
    failed = [o for o in outcomes if o.result is None]
    landed = [o for o in outcomes if o.result is not None]
    assert [(o.attempts, o.failure) for o in failed] == [(2, "worker process lost")]
    assert [(o.attempts, o.retried_after) for o in landed] == [(2, "worker process lost")]
    rows = rank(runs, outcomes)
    assert rows[-1].failure == "worker process lost" and rows[-1].hit_rate is None


def test_unreachable_ray_address_is_one_line_exit_2(tmp_path):
    """A --ray-address where nothing listens: exit 2, one line naming the address, no --out."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nobody listens there
    result = sweep_cli(tmp_path, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"kvctl: error: --ray-address 127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port} "
        "(Connection refused)"]
    assert not (tmp_path / "sweep").exists()


def test_worker_replays_from_bytes_not_from_the_path(local_sweep):
    """What a Ray task runs, given the trace's bytes and a path that exists nowhere: the
    report is the local run's, path included (the worker never opened the path)."""
    from kvctl.replay.ray_task import replay_bytes
    from kvctl.replay.runner import ReplaySettings

    elsewhere = "/nonexistent/kvctl-driver/head_500.jsonl"
    settings = ReplaySettings(workload=elsewhere, limit=8, pool_tokens=40000,
                              eviction_policy="lru", label="eviction=lru pool-tokens=40000")
    report = replay_bytes(settings, Path(HEAD).read_bytes()).report.to_dict()
    local = comparable_report(local_sweep[1].parent / "eviction-lru_pool-tokens-40000")
    assert report["workload"]["path"] == elsewhere
    report.pop("wall_clock")
    assert local.pop("schema_version") == 1  # report.json's envelope; the report itself has none
    assert report == {**local, "workload": {**local["workload"], "path": elsewhere}}


def test_ctrl_c_cancels_the_tasks_and_writes_nothing(tmp_path):
    """SIGINT to `kvctl replay --executor ray` (a local Ray instance) while a replay task
    runs: kvctl exits non-zero, --out does not exist, and every process it started (the
    Ray instance, the task's worker) is gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    env = {**os.environ, **LOOPBACK_RAY_ENV, "PYTHONPATH": str(Path(__file__).parents[2])}
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvctl", "replay", HEAD, "--limit", "8", *GRID, "--executor",
         "ray", "--out", str(out), "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default)
    kvctl = psutil.Process(proc.pid)
    try:
        deadline = time.monotonic() + 240
        while not any("kvctl-replay" in " ".join(_cmdline(p)) for p in _tree(kvctl)):
            assert proc.poll() is None and time.monotonic() < deadline, "no task started"
            time.sleep(0.5)
        started = _tree(kvctl)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and stdout == "" and "Traceback" not in stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []
    gone, alive = psutil.wait_procs(started, timeout=60)
    assert [p.pid for p in alive] == []


def _tree(process) -> list:
    import psutil

    try:
        return process.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _cmdline(process) -> list[str]:
    import psutil

    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []

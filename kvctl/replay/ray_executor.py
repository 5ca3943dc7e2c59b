"""Run a sweep's grid points as Ray tasks: a local Ray instance, or an existing cluster.

    driver (kvctl)                                   Ray cluster
    connect(address) ------------------------------> head (GCS)          InputError: exit 2
    ray.put(workload file's bytes)  ---------------> object store        (once per sweep)
    one task per grid point: num_cpus=1, memory=estimate(pool)
        ---> worker: ray_task.replay_point(settings, bytes) yields Started, ReplayResult
    ray.wait loop: done / running / failed -> on_update (the progress bar)
        lost worker, lost node, OOM kill  -> submitted once more, then reported failed
        the run itself raised (bad input, integrity)  -> failed at once (it is deterministic)
    RunOutcome per grid point, in grid order          Ctrl-C: cancel every task, re-raise

Each task runs in a Ray worker process of its own for as long as it runs, with its own
engine (SGLang's runtime context is process-wide); Ray may hand an idle worker process the
next task, as the local `--parallel` pool does and as the local sequential sweep runs every
grid point in one process. Workers read the workload from the object store, never from the
driver's path, so nodes need no shared filesystem; they do need kvctl (`pip install
kvctl[ray]`) at the driver's version, as Ray needs the same Ray and Python everywhere.

Ray is imported here only, and only kvctl.cli.replay's `--executor ray` path imports this
module, so every other command starts without it.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvctl.errors import InputError
from kvctl.replay.runner import ReplayResult, ReplaySettings
from kvctl.replay.sweep import RunOutcome

# Memory a task asks Ray for. Measured here: a replay process (Python, torch, SGLang's
# mem_cache modules, the engine) peaked at 1.06 GB RSS on head_500.jsonl with a 40k- and with
# a 1M-token pool (the KV pool itself is SGLang's NoOp pool: no K/V bytes). The per-token term
# bounds what grows with the pool: the radix tree's keys and values (int64 each) and the
# allocator's free list, with room to spare.
TASK_BASE_BYTES = 3 << 29  # 1.5 GiB
TASK_BYTES_PER_POOL_TOKEN = 64
LOCAL_OBJECT_STORE_MIN_BYTES = 128 << 20  # Ray's floor is 75 MiB; inputs and results are small
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, kw_only=True)
class SweepProgress:
    """What the progress bar shows: runs finished with a result, running now, failed."""

    done: int
    running: int
    failed: int
    total: int


def task_memory_bytes(pool_tokens: int) -> int:
    """The `memory` a grid point's Ray task declares (see TASK_BASE_BYTES)."""
    return TASK_BASE_BYTES + TASK_BYTES_PER_POOL_TOKEN * pool_tokens


def run_sweep_ray(runs: Sequence[ReplaySettings], pool_tokens: Sequence[int], *,
                  address: str | None = None, local_cpus: int = 1,
                  on_update: Callable[[SweepProgress], None] | None = None) -> list[RunOutcome]:
    """Run every grid point as a Ray task; outcomes in grid order.

    `address` None starts a local Ray instance with `local_cpus` CPUs (runs at a time) and
    stops it at the end; otherwise connects to that cluster (`auto`, `host:port` or
    `ray://host:port`) and disconnects at the end. Raises InputError (nothing has run) when
    Ray is missing, the cluster is unreachable or no node can take a run. A run that fails
    does not raise: its outcome says why. KeyboardInterrupt cancels every outstanding task.
    """
    if address is None and local_cpus < 1:
        raise InputError(f"--parallel must be positive, got {local_cpus}")
    workload = Path(runs[0].workload)
    data = workload.read_bytes()
    ray = _import_ray()
    connect(ray, address, local_cpus=local_cpus, input_bytes=len(data))
    try:
        memory = [task_memory_bytes(tokens) for tokens in pool_tokens]
        _check_feasible(ray, runs, memory)
        return _Scheduler(ray, runs, memory, ray.put(data), on_update).run()
    finally:
        ray.shutdown()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'kvctl[ray]' "
                         "(or -r requirements/ray.txt)") from None
    return ray


def connect(ray, address: str | None, *, local_cpus: int, input_bytes: int) -> None:
    """ray.init for a local instance (address None) or the cluster at `address`.
    Raises InputError in one line when the address is malformed or nobody answers."""
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        store = max(LOCAL_OBJECT_STORE_MIN_BYTES, 4 * input_bytes)
        ray.init(address="local", num_cpus=local_cpus, object_store_memory=store, **quiet)
        return
    if address != "auto":
        probe(address)
    quiet.pop("include_dashboard")  # only for a local instance
    try:
        ray.init(address=address, **quiet)
    except Exception as err:  # ConnectionError, RuntimeError, ValueError: Ray's own words
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(f"--ray-address {address}: cannot connect to a Ray cluster: "
                         f"{message}") from None


def probe(address: str) -> None:
    """A TCP connect to `host:port` (or `ray://host:port`), so that an unreachable cluster
    fails in seconds with one line instead of Ray's long connection retries."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"--ray-address {address!r}: expected auto, HOST:PORT or "
                         "ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise InputError(f"--ray-address {address}: no Ray cluster answers at {host}:{port} "
                         f"({reason})") from None


def _check_feasible(ray, runs: Sequence[ReplaySettings], memory: Sequence[int]) -> None:
    """Fail before submitting when no live node has a CPU and a run's memory estimate
    (Ray would otherwise keep the task pending for ever)."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    most_memory = max((r.get("memory", 0) for r in nodes if r.get("CPU", 0) >= 1), default=None)
    if most_memory is None:
        raise InputError("the Ray cluster has no node with a CPU for a replay task")
    worst = max(range(len(runs)), key=lambda i: memory[i])
    if memory[worst] > most_memory:
        raise InputError(
            f"sweep run {runs[worst].label!r} needs an estimated {memory[worst] / 2**30:.1f} "
            f"GiB; the largest Ray node with a CPU offers {most_memory / 2**30:.1f} GiB")


def failure_reason(err: BaseException) -> tuple[str, bool]:
    """(one-line reason, whether a retry may help) for what a task's result raised."""
    from ray import exceptions as rex

    if isinstance(err, rex.OutOfMemoryError):
        return "out of memory: Ray's memory monitor killed the worker", True
    if isinstance(err, rex.NodeDiedError):
        return "worker node lost", True
    if isinstance(err, rex.WorkerCrashedError):
        return "worker process lost", True
    if isinstance(err, rex.ObjectLostError):
        return "result lost with its node", True
    if isinstance(err, rex.RayTaskError):
        cause = err.cause if err.cause is not None else err
        text = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {text[0] if text else ''}".rstrip(": "), False
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": "), True


class _Scheduler:
    """Submits, waits, retries once, counts. Mutates only its own bookkeeping."""

    def __init__(self, ray, runs, memory, data_ref, on_update) -> None:
        from kvctl.replay.ray_task import replay_point

        self.ray = ray
        self.runs = runs
        self.memory = memory
        self.data_ref = data_ref
        self.on_update = on_update
        self.task = ray.remote(replay_point)
        self.outcomes: list[RunOutcome | None] = [None] * len(runs)
        self.attempts = [0] * len(runs)
        self.first_failure: list[str | None] = [None] * len(runs)
        self.live: dict = {}  # generator -> grid index
        self.running: set[int] = set()

    def run(self) -> list[RunOutcome]:
        try:
            for index in range(len(self.runs)):
                self._submit(index)
            self._report()
            while self.live:
                ready, _ = self.ray.wait(list(self.live), num_returns=1)
                for generator in ready:
                    self._advance(generator)
                self._report()
        except BaseException:
            self._cancel()
            raise
        return self.outcomes  # type: ignore[return-value]

    def _submit(self, index: int) -> None:
        self.attempts[index] += 1
        generator = self.task.options(
            num_cpus=1, memory=self.memory[index], max_retries=0, name="kvctl-replay",
        ).remote(self.runs[index], self.data_ref)
        self.live[generator] = index

    def _advance(self, generator) -> None:
        index = self.live[generator]
        try:
            item = self.ray.get(next(generator))
        except StopIteration:
            self.live.pop(generator)
            return
        except Exception as err:  # a Ray error: the task, its worker or its node failed
            self.live.pop(generator)
            self.running.discard(index)
            self._failed(index, err)
            return
        if isinstance(item, ReplayResult):
            self.live.pop(generator)
            self.running.discard(index)
            self.outcomes[index] = RunOutcome(result=item, attempts=self.attempts[index],
                                              retried_after=self.first_failure[index])
        else:  # Started
            self.running.add(index)

    def _failed(self, index: int, err: BaseException) -> None:
        reason, retryable = failure_reason(err)
        if retryable and self.attempts[index] == 1:
            self.first_failure[index] = reason
            self._submit(index)
            return
        self.outcomes[index] = RunOutcome(result=None, attempts=self.attempts[index],
                                          retried_after=self.first_failure[index], failure=reason)

    def _report(self) -> None:
        if self.on_update is None:
            return
        failed = sum(1 for o in self.outcomes if o is not None and o.result is None)
        done = sum(1 for o in self.outcomes if o is not None and o.result is not None)
        self.on_update(SweepProgress(done=done, running=len(self.running), failed=failed,
                                     total=len(self.runs)))

    def _cancel(self) -> None:
        for generator in list(self.live):
            try:
                self.ray.cancel(generator, force=True)
            except Exception:  # already finished or its node is gone: nothing to cancel
                pass
        self.live.clear()

"""`kvctl sandbox --replicas N --router POLICY`: N sandbox servers behind SGLang's own router.

    client ──> router (python -m sglang_router.launch_router, sglang-router 0.3.2, Rust)
                 ├──> worker 0: sglang.launch_server + kvctl's plugin   (launcher.py)
                 ├──> worker 1: ...
                 └──> worker N-1

Every worker is a SandboxServer on ports of its own (ports.free_block, none shared: `avoid`),
all loading ONE model dir (config.json + the one-character-per-id tokenizer, tokenizer.py):
SGLang's router keys workers (and cache_aware's trees) by model path, and N copies of the
model are N models to it (`GET /v1/models` lists each; routing of model-less requests was
the same in a test, docs/sandbox-fleet.md), so the fleet is one model, as a real one is.
The router starts first (its Python import alone takes about 40 s here) with `--worker-urls`
of every worker and looks for them every second; the workers start concurrently, at most one
per CPU core at a time (2 at once here took 113-134 s each, as long as one alone on this
loaded machine); the fleet is ready when the router's /readiness counts every worker healthy.

    RouterConfig(policy=..., cache_threshold=...)   the router's options, checked (check())
    check_replicas(n)                               1..MAX_REPLICAS, else InputError
    SandboxFleet(config, workdir, replicas=n, router=RouterConfig(...))
      .start()   workers, then the router; SandboxFailed naming the part that failed (after
                 stopping everything it had started)
      .stop()    the router, then every worker (each its whole process group)
      .url       the router; .servers the workers

The router runs offline: its tokenizer comes from the workers' local model dir (it loads
"from worker on the fly": the model path /server_info names), HF_HUB_OFFLINE is set, and its
Prometheus endpoint binds the sandbox's host on a free port (0.3.2 defaults to 0.0.0.0:29000).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kvctl.errors import InputError
from kvctl.sandbox import files
from kvctl.sandbox.config import SandboxConfig
from kvctl.sandbox.launcher import SandboxFailed, SandboxServer
from kvctl.sandbox.ports import free_block, require_free

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROUTER_VERSION = "0.3.2"  # requirements/router.txt
# sglang_router/router_args.py (0.3.2) `--policy` choices
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
# At most 8 workers: each is three processes (HTTP server, scheduler, detokenizer) of 2.0 GB
# proportional set size together (measured: 0.66 + 0.77 + 0.62 GB, tiny model, pool 2,048),
# the router 0.8 GB, so 8 take 17 GB of this 23 GB machine class; start-up is CPU-bound import
# time, about 100-115 s per pair of workers on 2 shared cores, so 8 take 7-8 minutes.
MAX_REPLICAS = 8
WORKER_WAIT_S = 1800  # the router's own wait for workers (0.3.2 default); kvctl: --startup-timeout
ROUTER_SHUTDOWN_S = 5  # --shutdown-grace-period-secs: 0.3.2 waits 180 s for in-flight requests


@dataclass(frozen=True, kw_only=True)
class RouterConfig:
    """The router's options; the defaults are sglang-router 0.3.2's own (RouterArgs)."""

    policy: str = "cache_aware"
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: int = 60
    max_tree_size: int = 2**26

    def check(self) -> None:
        """InputError naming the option, before anything starts."""
        if self.policy not in ROUTER_POLICIES:
            raise InputError(f"--router {self.policy!r} is not a policy of SGLang's router "
                             f"{ROUTER_VERSION}; valid: {', '.join(ROUTER_POLICIES)}")
        if not (0.0 <= self.cache_threshold <= 1.0):  # also refuses nan
            raise InputError(f"--cache-threshold must be between 0 and 1 (the share of a "
                             f"prompt a worker's tree must match), got {self.cache_threshold}")
        if self.balance_abs_threshold < 0:
            raise InputError(f"--balance-abs-threshold must be 0 or more (requests of load "
                             f"difference), got {self.balance_abs_threshold}")
        if not (1.0 <= self.balance_rel_threshold < math.inf):
            raise InputError(f"--balance-rel-threshold must be a finite number of at least 1 "
                             f"(max load > min load x this), got {self.balance_rel_threshold}")
        if self.eviction_interval_s < 1:
            raise InputError(f"--eviction-interval must be at least 1 second, got "
                             f"{self.eviction_interval_s}")
        if self.max_tree_size < 1:
            raise InputError(f"--max-tree-size must be at least 1, got {self.max_tree_size}")

    def args(self) -> list[str]:
        """The router's routing flags (0.3.2 names)."""
        return ["--policy", self.policy,
                "--cache-threshold", f"{self.cache_threshold:g}",
                "--balance-abs-threshold", str(self.balance_abs_threshold),
                "--balance-rel-threshold", f"{self.balance_rel_threshold:g}",
                "--eviction-interval-secs", str(self.eviction_interval_s),
                "--max-tree-size", str(self.max_tree_size)]

    def describe(self) -> dict:
        return dataclasses.asdict(self)


def check_replicas(replicas: int) -> None:
    if not 1 <= replicas <= MAX_REPLICAS:
        raise InputError(f"--replicas must be between 1 and {MAX_REPLICAS} (CPU servers this "
                         f"machine runs at once), got {replicas}")


def default_startup_timeout(replicas: int, cores: int | None = None) -> float:
    """Seconds a fleet gets to start: 300 per round of one worker per core (a pair took up to
    180 s here under load), + 300 for the router and slack; 600 for 1-2 workers on 2 cores."""
    cores = max(1, cores or os.cpu_count() or 1)
    return 300.0 * math.ceil(replicas / cores) + 300.0


def installed_router_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang-router")
    except PackageNotFoundError:
        return None


class SandboxFleet:
    """N SandboxServers and SGLang's router (module docstring)."""

    def __init__(self, config: SandboxConfig, workdir: Path, *, replicas: int,
                 router: RouterConfig) -> None:
        check_replicas(replicas)
        router.check()
        config.check()
        self.config = config
        self.router = router
        self.workdir = workdir
        host = config.host
        taken: set[int] = set()
        if config.port:  # --port is the router's: the address clients use
            require_free("--port", config.port, 1, host)
            taken.add(config.port)
        self.port = config.port or free_block(1, host, taken)
        self.metrics_port = free_block(1, host, taken)
        # every worker: free ports, the plugin on, the tokenizer on (the router routes text)
        worker = dataclasses.replace(config, port=0, plugin_port=0, tokenizer=True)
        self.model_dir = files.write_model(workdir / "model", config.context_length)
        self.servers = [SandboxServer(worker, workdir / f"worker-{k}", model_dir=self.model_dir,
                                      avoid=taken)
                        for k in range(replicas)]
        for server in self.servers:
            server.workdir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen | None = None
        self._cancel = threading.Event()  # stop() during start(): no worker starts after it
        self._starting: list[threading.Thread] = []
        self.log_path = workdir / "router.log"
        self.startup_s: float | None = None
        self.worker_startup_s: list[float | None] = [None] * replicas

    # ---- addresses ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.config.host}:{self.metrics_port}/metrics"

    @property
    def worker_urls(self) -> list[str]:
        return [server.url for server in self.servers]

    # ---- process ------------------------------------------------------------------------

    def router_command(self) -> list[str]:
        host = self.config.host
        return [sys.executable, "-m", "sglang_router.launch_router",
                "--worker-urls", *self.worker_urls, *self.router.args(),
                "--host", host, "--port", str(self.port),
                "--prometheus-host", host, "--prometheus-port", str(self.metrics_port),
                "--shutdown-grace-period-secs", str(ROUTER_SHUTDOWN_S),
                # started with the workers: look for them every second, not every 30 s
                "--worker-startup-check-interval", "1",
                "--worker-startup-timeout-secs", str(WORKER_WAIT_S)]

    def router_environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_COLOR": "1"})
        return env

    def start(self, timeout_s: float = 900.0) -> float:
        """The router, the workers (concurrently, one per core at a time), then the wait for
        the router to count them all healthy; returns seconds. Any failure stops everything
        started and raises SandboxFailed naming the part."""
        if installed_router_version() is None:
            raise SandboxFailed("SGLang's router is not installed (PyPI sglang-router): "
                                "pip install -r requirements/router.txt, or make setup")
        began = time.monotonic()
        deadline = began + timeout_s
        self._cancel.clear()
        try:
            # the router's own start-up (about 40 s here, most of it importing its Python
            # package) overlaps the workers'; it polls them every second until they answer
            self._launch_router()
            self._start_workers(deadline)
            self._wait_for_router(deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self.startup_s

    def _start_workers(self, deadline: float) -> None:
        gate = threading.Semaphore(max(1, os.cpu_count() or 1))
        failures: dict[int, BaseException] = {}

        def run(k: int, server: SandboxServer) -> None:
            with gate:
                if failures or self._cancel.is_set():  # another failed, or stop(): skip it
                    return
                try:
                    self.worker_startup_s[k] = server.start(
                        timeout_s=max(1.0, deadline - time.monotonic()))
                except BaseException as exc:  # noqa: BLE001 (reported below, by worker)
                    failures[k] = exc

        threads = [threading.Thread(target=run, args=(k, s), daemon=True,
                                    name=f"kvctl-fleet-start-{k}")
                   for k, s in enumerate(self.servers)]
        self._starting = threads
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            k = min(failures)
            raise SandboxFailed(f"worker {k} of {len(self.servers)} ({self.servers[k].url}) "
                                f"did not start: {failures[k]}")

    def _launch_router(self) -> None:
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                self.router_command(), cwd=self.workdir, env=self.router_environment(),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_for_router(self, deadline: float) -> None:
        want = len(self.servers)
        while True:
            healthy = self._healthy_workers()
            if healthy == want:
                return
            if self.process.poll() is not None:
                raise self._failed(f"the router exited {self.process.returncode}")
            if time.monotonic() > deadline:
                raise self._failed(f"the router counted {healthy or 0} of {want} workers "
                                   f"healthy when time ran out")
            time.sleep(0.5)

    def _healthy_workers(self) -> int | None:
        """/readiness's healthy_workers (0.3.2: {"status", "healthy_workers",
        "total_workers"}); None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.url}/readiness", timeout=5) as reply:
                return int(json.loads(reply.read()).get("healthy_workers", 0))
        except urllib.error.HTTPError as err:
            try:
                return int(json.loads(err.read()).get("healthy_workers", 0))
            except (ValueError, AttributeError):
                return None
        except (OSError, ValueError):
            return None

    def _failed(self, what: str) -> SandboxFailed:
        return SandboxFailed(f"{what}; log {self.log_path}: ... {self.router_tail()}")

    def router_tail(self, lines: int = 3, width: int = 200) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        text = _ANSI.sub("", text)  # 0.3.2 colours its log whatever NO_COLOR says
        kept = [line for line in text.splitlines() if line.strip()][-lines:]
        return " | ".join(line if len(line) <= width else line[:width] + "..." for line in kept)

    def stop(self, timeout_s: float = 30.0) -> None:
        """The router, then every worker (concurrently); no process of the fleet is left,
        also when called during start() (Ctrl-C, SIGTERM): no worker starts after it."""
        self._cancel.set()
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(30)
        self._stop_workers()
        for thread in self._starting:  # a start in progress ends once its process is gone
            thread.join(timeout_s)
        self._stop_workers()  # one that launched while the first pass ran

    def _stop_workers(self) -> None:
        threads = [threading.Thread(target=server.stop, daemon=True) for server in self.servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def exited(self) -> str | None:
        """A line naming the first part that exited, or None while all run."""
        if self.process is not None and self.process.poll() is not None:
            return (f"the router exited {self.process.returncode}; log {self.log_path}: ... "
                    f"{self.router_tail()}")
        for k, server in enumerate(self.servers):
            if server.process is not None and server.process.poll() is not None:
                return (f"worker {k} ({server.url}) exited {server.process.returncode}; log "
                        f"{server.log_path}: ... {server.short_tail()}")
        return None

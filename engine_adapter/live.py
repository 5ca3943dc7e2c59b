"""`LiveRun`: a workload running on the embedded engine in a background thread.

The exporter and the TUI watch a live run: it steps the engine continuously (as fast as
possible, or paced so that virtual time follows wall time), refreshes one cached
`Snapshot` at a fixed wall interval, and lets an operator pause, resume and flush.
It is a `ControllableSource`: consumers only ever see snapshots.

    run = LiveRun(engine_factory, driver_factory, pace=1.0, loop=True)
    run.start()
    snap = run.snapshot()      # latest consistent read, never blocks on a step
    run.pause(); run.step_once(); run.resume(); run.flush_cache(); run.close()

Threading: every engine call happens under one lock; `snapshot()` returns the cached
object (immutable), so readers never wait for the engine. When the workload is exhausted
and `loop` is set, a fresh driver (next seed) starts on the same warm engine, as new
traffic reaches a long-running server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine_adapter.embedded.engine import EmbeddedEngine
from engine_adapter.receipts import Receipt
from engine_adapter.snapshot import Snapshot
from engine_adapter.workload import WorkloadDriver
from kvctl.errors import RuntimeFailure

DriverFactory = Callable[[int], WorkloadDriver]  # iteration -> a fresh driver


class LiveRun:
    read_only = False

    def __init__(
        self,
        engine: EmbeddedEngine,
        driver_factory: DriverFactory,
        *,
        pace: float | None = None,
        loop: bool = True,
        snapshot_interval_s: float = 0.25,
        tree_interval_s: float | None = None,
        start_paused: bool = False,
    ) -> None:
        """pace: virtual seconds per wall second (None: as fast as the CPU allows).
        tree_interval_s: also read SGLang's per-node tree (lock refs, the tree browser's
        nodes) at most this often; None never (it walks the whole tree)."""
        self.engine = engine
        self._driver_factory = driver_factory
        self._iteration = 0
        self._driver = self._new_driver()
        self.pace = pace
        self.loop = loop
        self.snapshot_interval_s = snapshot_interval_s
        self.tree_interval_s = tree_interval_s
        self._next_tree = 0.0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._running = threading.Event()
        if not start_paused:
            self._running.set()
        self._thread: threading.Thread | None = None
        self._wall0 = time.monotonic()
        self._virtual0 = 0.0
        self.error: str | None = None
        self.finished = False
        self.steps = 0
        with self._lock:
            self._driver.prime(self.engine)
            self._refresh()

    def _new_driver(self) -> WorkloadDriver:
        driver = self._driver_factory(self._iteration)
        if hasattr(driver, "sid_prefix"):
            driver.sid_prefix = f"L{self._iteration}-" if self._iteration else ""
        self._iteration += 1
        return driver

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> LiveRun:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="kvctl-live-run", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._running.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ---- control -----------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._wall0 = time.monotonic()
        self._virtual0 = self.engine.clock_s
        self._running.set()

    def step_once(self) -> None:
        """Advance one engine step (while paused) and refresh the snapshot."""
        with self._lock:
            self._step()
            self._refresh(force_tree=True)

    def flush_cache(self) -> int:
        with self._lock:
            evicted = self.engine.flush_cache()
            self._refresh(force_tree=True)
            return evicted

    def _refresh(self, force_tree: bool = False) -> None:
        """Rebuild the cached snapshot (caller holds the lock)."""
        now = time.monotonic()
        per_node = self.tree_interval_s is not None and (force_tree or now >= self._next_tree)
        if per_node:
            self._next_tree = now + self.tree_interval_s
        self._snapshot = self.engine.snapshot(per_node_refs=per_node)

    # ---- reads -------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The latest snapshot; raises RuntimeFailure once the worker has died."""
        if self.error is not None:
            raise RuntimeFailure(f"the live run stopped: {self.error}")
        return self._snapshot

    def take_receipts(self) -> list[Receipt]:
        with self._lock:
            return self.engine.take_receipts()

    # ---- worker ------------------------------------------------------------------------

    def _step(self) -> None:
        engine, driver = self.engine, self._driver
        if not engine.has_work() and driver.exhausted():
            if not self.loop:
                self.finished = True
                return
            self._driver = self._new_driver()
            self._driver.prime(engine)
            driver = self._driver
        next_event = getattr(driver, "next_event_s", None)
        report = engine.step(horizon_s=next_event() if next_event is not None else None)
        driver.after_step(engine, report)
        self.steps += report.steps

    def _work(self) -> None:
        next_snapshot = time.monotonic()
        try:
            while not self._stop.is_set():
                if not self._running.wait(timeout=0.1):
                    continue
                if self._stop.is_set():
                    break
                with self._lock:
                    if not self.finished:
                        self._step()
                    now = time.monotonic()
                    if now >= next_snapshot:
                        self._refresh()
                        next_snapshot = now + self.snapshot_interval_s
                if self.finished:
                    time.sleep(self.snapshot_interval_s)
                    continue
                self._pace()
        except Exception as err:  # surfaced to the UI/exporter instead of dying silently
            self.error = f"{type(err).__name__}: {err}"
            self._running.clear()

    def _pace(self) -> None:
        if self.pace is None:
            return
        ahead = (self.engine.clock_s - self._virtual0) / self.pace - (time.monotonic() - self._wall0)
        if ahead > 0:
            self._stop.wait(min(ahead, self.snapshot_interval_s))

"""`LiveRun`: a workload running on the embedded engine in a background thread.

The exporter and the TUI watch a live run: it steps the engine continuously (as fast as
possible, or paced so that virtual time follows wall time), refreshes one cached
`Snapshot` at a fixed wall interval, and lets an operator pause, resume and flush.
It is a `ControllableSource`: consumers only ever see snapshots.

Pacing (pace p: p virtual seconds per wall second, counted from `start`/`resume`): the
engine never steps while its clock is ahead of wall time x p; decode jumps stop about one
tick past it; and an idle engine waits for its next arrival, reload completion or driver
event in wall time, its clock following wall time x p, instead of jumping to it. Every
wait is a sleep of at most `TICK_S` outside the lock, so pause, close and flush answer
within it; `pause()` returns once no step is in progress, and none starts until `resume()`.
Without a pace an idle engine jumps straight to its next event. `clock` (monotonic seconds,
default `time.monotonic`) is the wall time the pace follows; tests inject a manual one.

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
from engine_adapter.base.errors import RuntimeFailure

DriverFactory = Callable[[int], WorkloadDriver]  # iteration -> a fresh driver
TICK_S = 0.05  # longest wall sleep of a paced run between checks of pause/close


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
        clock: Callable[[], float] = time.monotonic,
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
        self._clock = clock
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._running = threading.Event()
        if not start_paused:
            self._running.set()
        self._thread: threading.Thread | None = None
        self._origin = (self._clock(), 0.0)  # (wall, virtual) the pace counts from
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
            self._origin = (self._clock(), self.engine.clock_s)
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
        """Stop stepping: on return no step is in progress and none starts before resume."""
        self._running.clear()
        with self._lock:  # a step already under way finishes first
            pass

    def resume(self) -> None:
        with self._lock:  # the worker's last step before the pause has finished
            self._origin = (self._clock(), self.engine.clock_s)
        self._running.set()

    def step_once(self) -> None:
        """Advance one engine step (while paused) and refresh the snapshot. An idle engine
        jumps to its next event, paced or not: the operator asked for the step."""
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
        now = self._clock()
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

    def _step(self, horizon_s: float | None = None) -> None:
        """One engine step; `horizon_s` also bounds a decode jump (the pace's)."""
        engine, driver = self.engine, self._driver
        if not engine.has_work() and driver.exhausted():
            if not self.loop:
                self.finished = True
                return
            self._driver = self._new_driver()
            self._driver.prime(engine)
            driver = self._driver
        events = [t for t in (self._driver_event_s(), horizon_s) if t is not None]
        report = engine.step(horizon_s=min(events) if events else None)
        driver.after_step(engine, report)
        self.steps += report.steps

    def _driver_event_s(self) -> float | None:
        next_event = getattr(self._driver, "next_event_s", None)
        return next_event() if next_event is not None else None

    def _advance(self) -> float:
        """Step, or under a pace wait, once (caller holds the lock); returns the wall
        seconds to sleep before the next call."""
        if self.pace is None:
            self._step()
            return 0.0
        wall0, virtual0 = self._origin
        due_s = virtual0 + (self._clock() - wall0) * self.pace  # wall time, in virtual s
        clock = self.engine.clock_s
        if clock > due_s:  # a step ran ahead of wall time: let wall time catch up
            return min((clock - due_s) / self.pace, TICK_S)
        event = self._idle_until_s()
        if event is None:
            self._step(horizon_s=due_s + self.pace * TICK_S)
            return 0.0
        to_s = max(clock, min(event, due_s))
        report = self.engine.wait_until(to_s)
        self._driver.after_step(self.engine, report)  # fires a driver event that fell due
        return 0.0 if to_s >= event else min((event - to_s) / self.pace, TICK_S)

    def _idle_until_s(self) -> float | None:
        """The virtual time an idle engine must wait for (its next arrival or reload
        completion, or the driver's next event if earlier); None: step now (work is
        runnable, or nothing is pending and the step ends or loops the workload)."""
        engine = self.engine
        if not engine.has_work() and self._driver.exhausted():
            return None
        clock, engine_event = engine.clock_s, engine.next_event_s()
        if engine_event is not None and engine_event <= clock:
            return None
        # a driver event already due fires in the next wait's after_step; never wait on it
        events = [t for t in (engine_event, self._driver_event_s()) if t is not None and t > clock]
        return min(events) if events else None

    def _work(self) -> None:
        next_snapshot = self._clock()
        try:
            while not self._stop.is_set():
                if not self._running.wait(timeout=0.1):
                    continue
                if self._stop.is_set():
                    break
                with self._lock:
                    if not self._running.is_set():  # paused while waiting for the lock
                        continue
                    wait_s = 0.0 if self.finished else self._advance()
                    now = self._clock()
                    if now >= next_snapshot:
                        self._refresh()
                        next_snapshot = now + self.snapshot_interval_s
                if self.finished:
                    self._stop.wait(self.snapshot_interval_s)
                elif wait_s > 0:
                    self._stop.wait(wait_s)
        except Exception as err:  # surfaced to the UI/exporter instead of dying silently
            self.error = f"{type(err).__name__}: {err}"
            self._running.clear()

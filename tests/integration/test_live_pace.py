"""A paced `LiveRun` keeps the embedded engine's virtual clock on wall time x pace while the
engine is idle: it waits in wall time for the next arrival instead of jumping to it, the
snapshot's clock grows meanwhile, pause stops it and close answers at once. Unpaced, an idle
engine still jumps straight to its next arrival.

Real embedded engine (SGLang's cache objects on CPU) and a real worker thread. The wall
time the pace follows is a manual clock the test advances (`LiveRun(clock=...)`), so every
figure is exact whatever the machine's load: at pace 20, 0.25 s of that clock is 5 virtual
seconds. Synchronisation is by polled conditions with generous timeouts (a timeout is a
failure, never a measurement); a fixed wait appears only where the test shows that nothing
moves."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytestmark = pytest.mark.integration

PACE = 20.0
SECOND_ARRIVAL_S = 10.0  # virtual: 0.5 s of wall time at pace 20
TIMEOUT_S = 60.0


class ManualClock:
    """Monotonic seconds that move only when the test says so (binary-exact steps)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TwoRequests:
    """A workload: r0 at virtual 0 s, r1 at `second_s`; records the (injected) wall time of
    every step that prefilled (an admission)."""

    name = "two-requests"

    def __init__(self, second_s: float, clock) -> None:
        self.second_s = second_s
        self.clock = clock
        self.admissions: list[tuple[float, float]] = []  # (wall clock, virtual clock)
        self.waits = 0  # paced-wait reports (steps == 0) seen

    def prime(self, engine) -> None:
        from engine_adapter.embedded.requests import RequestSpec

        origin = engine.clock_s
        for rid, at, first in (("r0", 0.0, 1), ("r1", self.second_s, 1_001)):
            engine.submit(RequestSpec(rid=rid, tokens=np.arange(first, first + 64, dtype=np.int64),
                                      max_new_tokens=4, arrival_s=origin + at))

    def after_step(self, engine, report) -> None:
        if report.prefill_tokens:
            self.admissions.append((self.clock(), report.clock_s))
        if report.steps == 0:
            self.waits += 1

    def exhausted(self) -> bool:
        return True

    def total_hint(self) -> int | None:
        return 2


def _run(pace: float | None, second_s: float = SECOND_ARRIVAL_S):
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.live import LiveRun

    clock = ManualClock()
    driver = TwoRequests(second_s, clock)
    engine = EmbeddedEngine(EngineConfig(pool_tokens=2_048, page_size=16))
    run = LiveRun(engine, lambda i: driver, pace=pace, loop=False, snapshot_interval_s=0.0,
                  clock=clock)
    return run, driver, clock


def _until(condition, timeout_s: float = TIMEOUT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _virtual_reaches(run, target_s: float, what: str):
    """The snapshot once its clock reads `target_s` (polled; exact up to float rounding)."""
    return _until(lambda: (s := run.snapshot()).virtual_time_s >= target_s - 1e-9 and s, what=what)


def test_idle_clock_follows_wall_time_instead_of_jumping():
    """Pace 20, r1 due at virtual 10 s: after 0.25 s of wall time the snapshot's clock reads
    exactly 5 s, r1 not admitted; 0.125 s more and it reads exactly 7.5 s (20 virtual s per
    wall s), r1 still waiting."""
    run, driver, clock = _run(PACE)
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 1, what="r0's admission")
        clock.advance(0.25)
        first = _virtual_reaches(run, 5.0, "the idle clock to reach virtual 5 s")
        assert first.virtual_time_s == pytest.approx(5.0, abs=1e-9)
        clock.advance(0.125)
        later = _virtual_reaches(run, 7.5, "the idle clock to reach virtual 7.5 s")
        assert later.virtual_time_s == pytest.approx(7.5, abs=1e-9)
        assert len(driver.admissions) == 1  # r1 still waiting for wall time
        assert driver.waits > 0
    finally:
        run.close()


def test_next_arrival_is_admitted_when_wall_time_reaches_it():
    """r1 (virtual 10 s, pace 20) is not admitted at 0.4375 s of wall time (virtual 8.75 s)
    and is admitted at virtual 10 s once wall time reaches 0.5 s."""
    run, driver, clock = _run(PACE)
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 1, what="r0's admission")
        clock.advance(0.4375)
        _virtual_reaches(run, 8.75, "the idle clock to reach virtual 8.75 s")
        assert len(driver.admissions) == 1
        clock.advance(0.0625)
        _until(lambda: len(driver.admissions) >= 2, what="r1's admission")
    finally:
        run.close()
    wall, virtual = driver.admissions[1]
    assert wall == 0.5
    assert SECOND_ARRIVAL_S <= virtual < SECOND_ARRIVAL_S + 0.1


def test_pause_during_the_idle_wait_stops_the_clock():
    """Paused at virtual 2.5 s, the clock does not move while 1 s of wall time passes and r1
    is not admitted; after resume it carries on from 2.5 s: r1 is admitted only once
    (10 - 2.5) / 20 = 0.375 s of wall time have passed since the resume."""
    run, driver, clock = _run(PACE)
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 1, what="r0's admission")
        clock.advance(0.125)
        _virtual_reaches(run, 2.5, "the idle clock to reach virtual 2.5 s")
        run.pause()  # returns once no step is in progress
        clock.advance(1.0)  # 20 virtual seconds, were the run not paused
        time.sleep(0.3)  # measured interval: nothing may move in it
        assert run.engine.clock_s == pytest.approx(2.5, abs=1e-9)
        assert len(driver.admissions) == 1
        run.resume()
        clock.advance(0.25)
        _until(lambda: run.engine.clock_s >= 7.5 - 1e-9, what="virtual 7.5 s after resume")
        assert len(driver.admissions) == 1
        clock.advance(0.125)
        _until(lambda: len(driver.admissions) >= 2, what="r1's admission after resume")
    finally:
        run.close()
    wall, virtual = driver.admissions[1]
    assert wall == 1.5 and SECOND_ARRIVAL_S <= virtual < SECOND_ARRIVAL_S + 0.1


def _in_thread(call):
    """Run `call` in a thread; returns (thread, result list)."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    return thread, result


def test_close_and_flush_answer_during_the_idle_wait():
    """During an idle wait that cannot end (r1 at virtual 3,600 s, pace 1, the wall clock
    stopped), flush_cache returns and evicts r0's cached pages, and close() returns with
    the worker thread gone: neither waits for the wait to end."""
    run, driver, clock = _run(1.0, second_s=3_600.0)
    run.start()
    worker = run._thread
    try:
        clock.advance(1.0)  # r0's steps need a little virtual time; then the clock stops
        _until(lambda: run.snapshot().counters.requests_finished == 1, what="r0 to finish")
        _until(lambda: driver.waits >= 3, what="the idle wait")
        flushing, evicted = _in_thread(run.flush_cache)
        flushing.join(TIMEOUT_S)
        assert not flushing.is_alive(), "flush_cache waited for the idle wait to end"
        assert evicted[0] > 0 and evicted[0] % 16 == 0
    finally:
        closing, _ = _in_thread(run.close)
        closing.join(TIMEOUT_S)
    assert not closing.is_alive() and not worker.is_alive()
    assert run.engine.clock_s < 60.0  # waited in wall time, never jumped toward 3,600 s


def test_unpaced_idle_engine_still_jumps_to_the_next_arrival():
    """Without a pace the idle engine jumps: r1 at virtual 3,600 s is admitted at 3,600 s
    while the wall clock has not moved at all."""
    run, driver, clock = _run(None, second_s=3_600.0)
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 2, what="r1's admission")
    finally:
        run.close()
    wall, virtual = driver.admissions[1]
    assert 3_600.0 <= virtual < 3_600.1
    assert wall == 0.0

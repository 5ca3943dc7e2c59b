"""A paced `LiveRun` keeps the embedded engine's virtual clock on wall time x pace while the
engine is idle: it waits in wall time for the next arrival instead of jumping to it, the
snapshot's clock grows meanwhile, pause stops it and close answers at once. Unpaced, an idle
engine still jumps straight to its next arrival.

Real embedded engine (SGLang's cache objects on CPU) and a real worker thread; the bounds
are wide because the test machine is shared. Synchronisation is by polled conditions with
timeouts; fixed waits appear only where the test measures that nothing moves."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.integration

PACE = 20.0
SECOND_ARRIVAL_S = 10.0  # virtual: 0.5 s of wall time at pace 20
TIMEOUT_S = 20.0


class TwoRequests:
    """A workload: r0 at virtual 0 s, r1 at `second_s`; records the wall time of every step
    that prefilled (an admission)."""

    name = "two-requests"

    def __init__(self, second_s: float) -> None:
        self.second_s = second_s
        self.admissions: list[tuple[float, float]] = []  # (wall monotonic, virtual clock)
        self.waits = 0  # paced-wait reports (steps == 0) seen

    def prime(self, engine) -> None:
        from engine_adapter.embedded.requests import RequestSpec

        origin = engine.clock_s
        for rid, at, first in (("r0", 0.0, 1), ("r1", self.second_s, 1_001)):
            engine.submit(RequestSpec(rid=rid, tokens=np.arange(first, first + 64, dtype=np.int64),
                                      max_new_tokens=4, arrival_s=origin + at))

    def after_step(self, engine, report) -> None:
        if report.prefill_tokens:
            self.admissions.append((time.monotonic(), report.clock_s))
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

    driver = TwoRequests(second_s)
    engine = EmbeddedEngine(EngineConfig(pool_tokens=2_048, page_size=16))
    run = LiveRun(engine, lambda i: driver, pace=pace, loop=False, snapshot_interval_s=0.02)
    return run, driver


def _until(condition, timeout_s: float = TIMEOUT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_idle_clock_follows_wall_time_instead_of_jumping():
    """Pace 20, r1 due at virtual 10 s: after >= 0.25 s of wall time the snapshot's clock is
    past 2 s but short of 10 s, r1 not admitted yet; across idle snapshots the clock grows
    at 20 virtual s per wall s of the snapshots' own wall times (+-35%)."""
    run, driver = _run(PACE)
    start = time.monotonic()
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 1, what="r0's admission")
        _until(lambda: time.monotonic() - start >= 0.25, what="0.25 s of wall time")
        first = _until(lambda: (s := run.snapshot()).virtual_time_s >= 2.0 and s,
                       what="the idle clock to pass virtual 2 s")
        assert first.virtual_time_s < SECOND_ARRIVAL_S
        assert len(driver.admissions) == 1  # r1 still waiting for wall time
        later = _until(lambda: (s := run.snapshot()).wall_time_s >= first.wall_time_s + 0.1 and s,
                       what="a snapshot 0.1 s later")
        assert later.virtual_time_s < SECOND_ARRIVAL_S and len(driver.admissions) == 1
        rate = ((later.virtual_time_s - first.virtual_time_s)
                / (later.wall_time_s - first.wall_time_s))
        assert PACE * 0.65 <= rate <= PACE * 1.35, rate
        assert driver.waits > 0
    finally:
        run.close()


def test_next_arrival_is_admitted_when_wall_time_reaches_it():
    """r1 (virtual 10 s, pace 20) is admitted at virtual 10 s, no sooner than 0.5 s of wall
    time after start (within 5 s on a loaded machine)."""
    run, driver = _run(PACE)
    start = time.monotonic()
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 2, what="r1's admission")
    finally:
        run.close()
    wall, clock = driver.admissions[1]
    assert SECOND_ARRIVAL_S <= clock < SECOND_ARRIVAL_S + 0.1
    assert SECOND_ARRIVAL_S / PACE - 0.01 <= wall - start <= 5.0, wall - start


def test_pause_during_the_idle_wait_stops_the_clock():
    """Paused while idle, the clock does not move for 0.5 s of wall time and r1 is not
    admitted; after resume it carries on from where it stopped (r1 admitted no sooner than
    (10 - stopped clock) / 20 wall seconds after the resume)."""
    run, driver = _run(PACE)
    run.start()
    try:
        _until(lambda: run.engine.clock_s >= 1.0, what="the idle clock to pass virtual 1 s")
        run.pause()

        def settled():  # the worker has noticed the pause: two reads 0.15 s apart agree
            before = run.engine.clock_s
            time.sleep(0.15)
            return run.engine.clock_s == before
        _until(settled, what="the clock to stop")
        stopped = run.engine.clock_s
        time.sleep(0.5)  # measured interval: nothing may move in it
        assert run.engine.clock_s == stopped < SECOND_ARRIVAL_S
        assert len(driver.admissions) == 1
        resumed = time.monotonic()
        run.resume()
        _until(lambda: len(driver.admissions) >= 2, what="r1's admission after resume")
    finally:
        run.close()
    wall, clock = driver.admissions[1]
    assert clock >= SECOND_ARRIVAL_S
    assert wall - resumed >= (SECOND_ARRIVAL_S - stopped) / PACE - 0.01


def test_close_and_flush_answer_promptly_during_the_idle_wait():
    """During a long idle wait (r1 at virtual 3,600 s, pace 1) flush_cache returns within
    0.5 s and evicts r0's cached pages, and close() returns within 0.5 s with the worker
    thread gone."""
    run, driver = _run(1.0, second_s=3_600.0)
    run.start()
    worker = run._thread
    try:
        _until(lambda: run.snapshot().counters.requests_finished == 1, what="r0 to finish")
        _until(lambda: driver.waits >= 3, what="the idle wait")
        t0 = time.monotonic()
        evicted = run.flush_cache()
        assert time.monotonic() - t0 < 0.5
        assert evicted > 0 and evicted % 16 == 0
    finally:
        t0 = time.monotonic()
        run.close()
        closed_in = time.monotonic() - t0
    assert closed_in < 0.5, closed_in
    assert not worker.is_alive()
    assert run.engine.clock_s < 60.0  # waited in wall time, never jumped toward 3,600 s


def test_unpaced_idle_engine_still_jumps_to_the_next_arrival():
    """Without a pace the idle engine jumps: r1 at virtual 3,600 s is admitted at 3,600 s
    within 10 s of wall time."""
    run, driver = _run(None, second_s=3_600.0)
    start = time.monotonic()
    run.start()
    try:
        _until(lambda: len(driver.admissions) >= 2, timeout_s=10.0, what="r1's admission")
    finally:
        run.close()
    wall, clock = driver.admissions[1]
    assert 3_600.0 <= clock < 3_600.1
    assert wall - start < 10.0

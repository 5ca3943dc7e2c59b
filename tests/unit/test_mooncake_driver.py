"""`MooncakeDriver` submits arrivals lazily, a window ahead of the engine's virtual clock.

The driver only calls `engine.submit(spec)`; `SubmitLog` records those calls (the SGLang
side is exercised by the integration tests).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from engine_adapter.workload import WorkloadDriver
from kvctl.replay.mooncake import MooncakeDriver

pytestmark = pytest.mark.unit


class SubmitLog:
    """Stands in for the engine's submit side: records specs; the clock starts at 0."""

    clock_s = 0.0

    def __init__(self) -> None:
        self.specs = []

    def submit(self, spec) -> None:
        self.specs.append(spec)


def trace(tmp_path: Path, arrivals_ms: list[int]) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(
        f'{{"timestamp": {t}, "input_length": 600, "output_length": 2, "hash_ids": [{i}, {i + 100}]}}\n'
        for i, t in enumerate(arrivals_ms)))
    return path


def step(clock_s: float):
    return SimpleNamespace(clock_s=clock_s)


def test_driver_satisfies_the_workload_protocol(tmp_path):
    """It is a WorkloadDriver (runtime-checkable protocol)."""
    assert isinstance(MooncakeDriver(trace(tmp_path, [0])), WorkloadDriver)


def test_prime_submits_only_the_first_window(tmp_path):
    """With a 2 s window, arrivals at 0, 1.5 and 2 s go in at prime; 2.5 s and 9 s wait."""
    driver = MooncakeDriver(trace(tmp_path, [0, 1500, 2000, 2500, 9000]), window_s=2.0)
    log = SubmitLog()
    driver.prime(log)
    assert [s.arrival_s for s in log.specs] == [0.0, 1.5, 2.0]
    assert not driver.exhausted()


def test_an_idle_gap_still_leaves_one_future_arrival_known(tmp_path):
    """Once the clock passes every submitted arrival, the next one is submitted even if it
    is far beyond the window, so an idle engine can jump its clock to it."""
    driver = MooncakeDriver(trace(tmp_path, [0, 60_000, 61_000, 120_000]), window_s=2.0)
    log = SubmitLog()
    driver.prime(log)
    assert [s.arrival_s for s in log.specs] == [0.0, 60.0]
    driver.after_step(log, step(0.5))
    assert len(log.specs) == 2
    driver.after_step(log, step(60.0))
    assert [s.arrival_s for s in log.specs] == [0.0, 60.0, 61.0]
    driver.after_step(log, step(61.0))
    assert [s.arrival_s for s in log.specs] == [0.0, 60.0, 61.0, 120.0]
    assert driver.exhausted()


def test_requests_keep_trace_order_and_line_ids(tmp_path):
    """Request ids name the trace line: mc-1, mc-2, ..."""
    driver = MooncakeDriver(trace(tmp_path, [0, 0, 0]), window_s=1.0)
    log = SubmitLog()
    driver.prime(log)
    assert [s.rid for s in log.specs] == ["mc-1", "mc-2", "mc-3"]
    assert driver.submitted == 3


def test_limit_caps_the_submissions(tmp_path):
    """limit=2 submits two requests and then reports exhaustion."""
    driver = MooncakeDriver(trace(tmp_path, [0, 0, 0, 0]), limit=2)
    log = SubmitLog()
    driver.prime(log)
    assert len(log.specs) == 2 and driver.exhausted()

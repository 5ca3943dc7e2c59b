"""The contract between a workload (a trace, a scenario) and the embedded engine.

A driver submits `RequestSpec`s (arrival times relative to `engine.clock_s` at `prime`) and reacts to finished requests (a session's next turn
after its tool wait, a fork's children, a scheduled generation bump). The engine never
knows where requests come from; drivers never touch SGLang objects.

    driver.prime(engine)                      # submit what is known up front
    loop:
        report = engine.step()
        driver.after_step(engine, report)     # follow-ups, timed events, lazy arrivals
    until not engine.has_work() and driver.exhausted()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from engine_adapter.embedded.engine import EmbeddedEngine, StepReport


@runtime_checkable
class WorkloadDriver(Protocol):
    name: str

    def prime(self, engine: EmbeddedEngine) -> None:
        """Submit the requests (or the first window of them) known before time 0."""
        ...

    def after_step(self, engine: EmbeddedEngine, report: StepReport) -> None:
        """React to one step: submit follow-up turns, due arrivals, timed operator events.
        Must keep the engine's next arrival known while requests remain, so an idle engine
        can advance its clock."""
        ...

    def exhausted(self) -> bool:
        """True once the driver will never submit another request."""
        ...

    def total_hint(self) -> int | None:
        """Expected number of requests (for progress bars), or None if unknown."""
        ...


def drive(
    engine: EmbeddedEngine,
    driver: WorkloadDriver,
    *,
    max_steps: int | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    check_every_step: bool = False,
) -> int:
    """Run `driver` to completion on `engine` (or `max_steps`); returns steps taken.

    check_every_step: call `engine.check_integrity()` after each step (raises on the first
    violation, naming the step).
    """
    driver.prime(engine)
    steps = 0
    while max_steps is None or steps < max_steps:
        if not engine.has_work() and driver.exhausted():
            break
        next_event = getattr(driver, "next_event_s", None)
        report = engine.step(horizon_s=next_event() if next_event is not None else None)
        steps += report.steps
        driver.after_step(engine, report)
        if check_every_step:
            from engine_adapter.base.errors import IntegrityError

            try:
                engine.check_integrity()
            except IntegrityError as err:
                raise IntegrityError(f"step {steps}: {err}") from None
        if on_step is not None:
            on_step(report)
        if report.idle and not engine.has_work() and driver.exhausted():
            break
    return steps

"""A workload running live on the embedded engine, for `kvctl monitor` and `kvctl exporter`.

`plan_live_run` validates the workload file at once (a bad file is a one-line InputError
before anything runs) and returns a plan whose `build()` constructs the engine (SGLang's
import takes seconds) and starts a `LiveRun`. Scenarios and traces both loop: when the
workload is exhausted the next pass starts on the same warm engine (a scenario with the
next seed; a trace again, its request ids prefixed), as new traffic reaches a server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvctl.errors import InputError

TRACE_POOL_TOKENS = 262_144  # NoOp pool: slots cost no memory
TRACE_MAX_CONTEXT = 32_768  # raised to the trace's longest request


@dataclass(frozen=True)
class LivePlan:
    label: str
    build: Callable[[], object]  # -> a started engine_adapter.live.LiveRun


def plan_live_run(
    *,
    scenario: str | Path | None = None,
    trace: str | Path | None = None,
    seed: int | None = None,
    pace: float | None = 1.0,
    pool_tokens: int | None = None,
    snapshot_interval_s: float = 0.25,
    tree_interval_s: float | None = None,
    receipts: bool = False,
    device: str = "cpu",
) -> LivePlan:
    """Validate the workload now; build and start the engine later (`plan.build()`)."""
    if (scenario is None) == (trace is None):
        raise InputError("give exactly one of --scenario or --trace")
    path = Path(scenario if scenario is not None else trace)
    if not path.is_file():
        raise InputError(f"{'--scenario' if scenario is not None else '--trace'} {path}: no such file")
    if scenario is not None:
        from kvctl.replay.scenario import load_scenario

        first = load_scenario(path, seed=seed)
        base_seed = first.scenario.seed if seed is None else seed
        defaults = dict(first.engine_defaults)

        def drivers(iteration: int):
            return first if iteration == 0 else load_scenario(path, seed=base_seed + iteration)

        label = f"{path.name} (scenario, seed {base_seed})"
    else:
        from kvctl.replay.mooncake import MooncakeDriver, scan_trace

        summary = scan_trace(path)  # validates every line now
        defaults = {"pool_tokens": TRACE_POOL_TOKENS,
                    "max_context_len": max(TRACE_MAX_CONTEXT, summary.max_request_tokens)}

        def drivers(iteration: int):
            return MooncakeDriver(path, summary=summary)

        label = f"{path.name} (trace)"
    pool = pool_tokens if pool_tokens is not None else defaults.get("pool_tokens")
    defaults.pop("pool_tokens", None)

    def build():
        from engine_adapter.embedded.engine import EmbeddedEngine  # imports SGLang: seconds
        from engine_adapter.live import LiveRun
        from kvctl.replay.engine_setup import engine_config

        engine = EmbeddedEngine(engine_config(pool_tokens=pool, receipts=receipts, device=device,
                                              **defaults))
        return LiveRun(engine, drivers, pace=pace, loop=True, snapshot_interval_s=snapshot_interval_s,
                       tree_interval_s=tree_interval_s).start()

    return LivePlan(label=label, build=build)

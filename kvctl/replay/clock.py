"""Which virtual clock a replay runs on: the roofline (default, planning without a server) or
a step-cost model fitted to a real server (`kvctl calibrate`, `--cost-model FILE`).

`replay_clock(path)` loads and validates the file before any engine exists (a bad file is
one InputError line, exit 2) and says how the report labels the latencies: "modeled" for
the roofline, "fitted (FILE)" for a fitted model, with a note carrying the fit's quality.
"""

from __future__ import annotations

from typing import NamedTuple

from engine_adapter.embedded.step_cost import StepCostModel

ROOFLINE_LABEL = "modeled"


class ReplayClock(NamedTuple):
    step_cost: StepCostModel | None  # None: the roofline
    label: str  # "modeled" | "fitted (server-cost.json)"
    note: str | None  # the report note replacing the roofline's; None for the roofline


def replay_clock(cost_model: str | StepCostModel | None) -> ReplayClock:
    """`cost_model`: a model file's path, a `StepCostModel` already fitted (e.g. by
    `fit_from_samples` on steps collected during a drive), or None for the roofline."""
    if cost_model is None:
        return ReplayClock(None, ROOFLINE_LABEL, None)
    if isinstance(cost_model, StepCostModel):
        step = cost_model
    else:
        from kvctl.calibrate.model_file import load_cost_model

        step = load_cost_model(cost_model)
    label = f"fitted ({step.source or 'calibrated step-cost model'})"
    quality = ""
    if step.fit is not None:
        quality = (f" (R^2 {step.fit.r2:.3f}, median relative error "
                   f"{step.fit.median_rel_error:.1%} on {step.fit.samples:,} server steps)")
    name = f" {step.source}" if step.source else ""
    note = (f"latencies are fitted: virtual clock from the step-cost model{name}{quality}; "
            "--model / --gpu still size the pool and bytes per token")
    return ReplayClock(step, label, note)

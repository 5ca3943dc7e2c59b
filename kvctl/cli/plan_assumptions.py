"""The assumptions a `kvctl plan` report prints under its tables (and carries in --json).

Every default a plan rests on is shown, marked "default", next to what the user set:
hardware and budget (`kvctl.sizing.budget`), where the weights came from, the tool wait and
generation time that drive the host tier (Little's law), the admission ceiling, and units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvctl.errors import InputError
from kvctl.sizing.budget import DEFAULT_TAU_HIGH, UNITS_NOTE, Assumption, HardwareBudget

# Seed 003 napkin math 0.6 prices a 45-second tool wait; the 5 s generation turn is kvctl's.
DEFAULT_TOOL_WAIT_SECONDS = 45.0
DEFAULT_GENERATION_SECONDS = 5.0


@dataclass(frozen=True, kw_only=True)
class ToolWaits:
    """T_tool_wait and T_generation per turn, seconds, and whether the user gave each."""

    tool_wait_seconds: float
    generation_seconds: float
    tool_wait_given: bool
    generation_given: bool


def tool_waits(tool_wait_seconds: float | None, generation_seconds: float | None) -> ToolWaits:
    """Resolve the two Little's-law inputs, defaulting each. InputError when not positive."""
    for name, value in (("--tool-wait-seconds", tool_wait_seconds),
                        ("--generation-seconds", generation_seconds)):
        if value is not None and not 0 < value < math.inf:
            raise InputError(f"{name} must be a positive, finite number of seconds, got {value}")
    return ToolWaits(
        tool_wait_seconds=DEFAULT_TOOL_WAIT_SECONDS if tool_wait_seconds is None else tool_wait_seconds,
        generation_seconds=(DEFAULT_GENERATION_SECONDS if generation_seconds is None
                            else generation_seconds),
        tool_wait_given=tool_wait_seconds is not None,
        generation_given=generation_seconds is not None,
    )


def weights_source(weights_gb: str | None, params_b: float | None, geometry: Any | None) -> Assumption:
    """Where the per-device weights came from."""
    if weights_gb is not None:
        return Assumption("weights", "whole model, split over TP x PP", "--weights-gb")
    if params_b is not None:
        return Assumption("weights", f"{params_b:g}B params x dtype / (TP x PP)", "--params-b")
    count = f"{geometry.num_params / 1e9:.2f}B" if geometry is not None and geometry.num_params else "?"
    return Assumption("weights", f"{count} params x dtype / (TP x PP)",
                      "default: counted, seed 003 eq. (4)")


def plan_assumptions(
    hardware: HardwareBudget,
    *,
    weights: Assumption,
    waits: ToolWaits | None,
    tau_high: float,
    extra: tuple[Assumption, ...] = (),
) -> tuple[Assumption, ...]:
    """The assumption lines of a plan: hardware, weights, tool waits (when they matter),
    tau_high, anything command-specific, units."""
    lines = [*hardware.assumptions(), weights]
    if waits is not None:
        lines.append(Assumption("tool wait", f"{waits.tool_wait_seconds:g} s per turn",
                                "--tool-wait-seconds" if waits.tool_wait_given
                                else "default: seed 003 napkin 0.6"))
        lines.append(Assumption("generation", f"{waits.generation_seconds:g} s per turn",
                                "--generation-seconds" if waits.generation_given
                                else "default: kvctl's, not from a seed"))
    lines.append(Assumption("tau_high", f"admit while U_KV <= {tau_high:g}",
                            "--tau-high" if tau_high != DEFAULT_TAU_HIGH else "default: seed 003 Figure 12"))
    lines += extra
    lines.append(Assumption("units", UNITS_NOTE, "convention"))
    return tuple(lines)


def option(name: str, value: str, flag: str, *, given: bool, default_source: str) -> Assumption:
    """An Assumption for one option: `flag` when the user set it, else `default_source`."""
    return Assumption(name, value, flag if given else f"default: {default_source}")

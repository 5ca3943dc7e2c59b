"""The hardware and budget options shared by `kvctl size` and the `kvctl plan` commands.

One declaration per option, so every command spells, reads and defaults them the same way
(`kvctl.sizing.budget` holds the defaults and the arithmetic):

    --gpu NAME         preset (default H100-SXM)
    --hbm-gb SIZE      memory per device, overriding the preset's
    --weights-gb SIZE  whole-model weights, split over TP x PP (default: params x dtype)
    --reserve-gb SIZE  activations + runtime reserve per device (default 4.5 GB)
    --headroom F       share of pool tokens kept free (default 0.10)

SIZE is decimal GB as a bare number (`80`) or carries a unit (`80GiB`, `512MiB`, `1.5TB`).
`--runtime-gb` is a hidden alias of `--reserve-gb` (its old name in `kvctl plan`).
"""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from kvctl.errors import InputError
from kvctl.sizing.budget import DEFAULT_GPU, DEFAULT_HEADROOM, HardwareBudget
from kvctl.sizing.hardware import GPU_PRESETS, resolve_gpu, with_capacity

_UNITS = {
    "": 10**9, "gb": 10**9, "g": 10**9, "kb": 10**3, "mb": 10**6, "tb": 10**12,
    "kib": 2**10, "gib": 2**30, "mib": 2**20, "tib": 2**40, "b": 1,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
SIZE_HELP = "GB (10^9 bytes), or with a unit: 80GiB, 512MiB"


def parse_size(text: str, option: str, *, allow_zero: bool = False) -> int:
    """Bytes from '80', '80GB', '80GiB', '512MiB'. InputError naming `option` otherwise."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise InputError(f"{option} {text!r}: expected a non-negative size such as 80 or 80GiB")
    value = int(round(float(match.group(1)) * _UNITS[unit]))
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{option} must be positive, got {text!r}")
    return value


Gpu = Annotated[str, typer.Option("--gpu", help=(
    f"GPU preset: {', '.join(GPU_PRESETS)} (aliases such as H100)."))]
HbmGb = Annotated[Optional[str], typer.Option("--hbm-gb", help=(
    f"Memory per GPU, overriding the preset's; {SIZE_HELP}."))]
WeightsGb = Annotated[Optional[str], typer.Option("--weights-gb", help=(
    "Whole-model weights instead of params x dtype, split over TP*PP; "
    f"{SIZE_HELP}."))]
ReserveGb = Annotated[Optional[str], typer.Option("--reserve-gb", help=(
    "Activations + runtime reserve per GPU (CUDA context, NCCL, graphs); default 4.5 "
    f"(seed 003 napkin 0.7); {SIZE_HELP}."))]
RuntimeGbAlias = Annotated[Optional[str], typer.Option("--runtime-gb", hidden=True, help=(
    "Old name of --reserve-gb."))]
Headroom = Annotated[Optional[float], typer.Option("--headroom", help=(
    f"Share of pool tokens the allocator keeps free; default {DEFAULT_HEADROOM:g} "
    "(seed 003 napkin 0.7)."))]


def hardware_budget(
    *,
    gpu: str = DEFAULT_GPU,
    hbm_gb: str | None = None,
    weights_gb: str | None = None,
    reserve_gb: str | None = None,
    runtime_gb: str | None = None,
    headroom: float | None = None,
) -> HardwareBudget:
    """The HardwareBudget these option values describe. InputError on bad values."""
    if reserve_gb is not None and runtime_gb is not None:
        raise InputError("--runtime-gb is the old name of --reserve-gb; give one")
    reserve_text = reserve_gb if reserve_gb is not None else runtime_gb
    spec = resolve_gpu(gpu)
    if hbm_gb is not None:
        spec = with_capacity(spec, parse_size(hbm_gb, "--hbm-gb"))
    if headroom is not None and not 0.0 <= headroom < 1.0:
        raise InputError(f"--headroom must be in [0, 1), got {headroom}")
    fields = {}
    if reserve_text is not None:
        name = "--reserve-gb" if reserve_gb is not None else "--runtime-gb"
        fields.update(reserve_bytes=parse_size(reserve_text, name, allow_zero=True),
                      reserve_given=True)
    if headroom is not None:
        fields.update(headroom=headroom, headroom_given=True)
    return HardwareBudget(
        gpu=spec,
        hbm_given=hbm_gb is not None,
        weights_total_bytes=(None if weights_gb is None
                             else parse_size(weights_gb, "--weights-gb", allow_zero=True)),
        **fields,
    )


def given(hardware: HardwareBudget) -> frozenset[str]:
    """Which of hbm / reserve / headroom the user set (SizeRequest.given)."""
    flags = {"hbm": hardware.hbm_given, "reserve": hardware.reserve_given,
             "headroom": hardware.headroom_given}
    return frozenset(name for name, value in flags.items() if value)

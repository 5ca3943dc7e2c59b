"""The hardware and budget options shared by `kvctl size` and the `kvctl plan` commands.

One declaration per option, so every command spells, reads and defaults them the same way
(`kvctl.sizing.budget` holds the defaults and the arithmetic):

    --gpu NAME         preset (default H100-SXM)
    --hbm-gb SIZE      memory per device, overriding the preset's
    --weights-gb SIZE  whole-model weights, split over TP x PP (default: params x dtype)
    --reserve-gb SIZE  activations + runtime reserve per device (default 4.5 GB)
    --headroom F       share of pool tokens kept free (default 0.10)

SIZE is decimal GB as a bare number (`80`) or carries a unit (`80GiB`, `512MiB`, `1.5TB`),
read by the one size parser (kvctl/cli/size_text.py) with `default_unit="gb"`.
`--runtime-gb` is a hidden alias of `--reserve-gb` (its old name in `kvctl plan`).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.cli.size_text import parse_size
from kvctl.errors import InputError
from kvctl.sizing.budget import DEFAULT_GPU, DEFAULT_HEADROOM, HardwareBudget
from kvctl.sizing.hardware import GPU_PRESETS, resolve_gpu, with_capacity

SIZE_HELP = "GB (10^9 bytes), or with a unit: 80GiB, 512MiB"


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
        spec = with_capacity(spec, parse_size(hbm_gb, "--hbm-gb", default_unit="gb", allow_zero=False))
    if headroom is not None and not 0.0 <= headroom < 1.0:
        raise InputError(f"--headroom must be in [0, 1), got {headroom}")
    fields = {}
    if reserve_text is not None:
        name = "--reserve-gb" if reserve_gb is not None else "--runtime-gb"
        fields.update(reserve_bytes=parse_size(reserve_text, name, default_unit="gb"),
                      reserve_given=True)
    if headroom is not None:
        fields.update(headroom=headroom, headroom_given=True)
    return HardwareBudget(
        gpu=spec,
        hbm_given=hbm_gb is not None,
        weights_total_bytes=(None if weights_gb is None
                             else parse_size(weights_gb, "--weights-gb", default_unit="gb")),
        **fields,
    )


def given(hardware: HardwareBudget) -> frozenset[str]:
    """Which of hbm / reserve / headroom the user set (SizeRequest.given)."""
    flags = {"hbm": hardware.hbm_given, "reserve": hardware.reserve_given,
             "headroom": hardware.headroom_given}
    return frozenset(name for name, value in flags.items() if value)

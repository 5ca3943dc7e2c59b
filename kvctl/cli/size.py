"""Size the KV cache: bytes per token, pool, pages, and how many trajectories fit per context.

Pure Python: imports neither torch nor sglang (tests/unit/test_size_imports.py checks).
The command parses options, builds a SizeRequest, and renders the SizeReport as a Rich
table or, with --json, as the report's dataclasses in JSON.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Optional

import typer

from kvctl.cli.budget_options import (
    Gpu,
    HbmGb,
    Headroom,
    ReserveGb,
    WeightsGb,
    given,
    hardware_budget,
)
from kvctl.errors import InputError
from kvctl.sizing.budget import DEFAULT_GPU
from kvctl.sizing.models import PRESETS, presets_with_same_kv, resolve_model
from kvctl.sizing.size_report import (
    SizeRequest,
    build_size_report,
    default_contexts,
)

def parse_contexts(text: str) -> tuple[int, ...]:
    """'8192,32768,128k' -> (8192, 32768, 131072); k means 1024. InputError otherwise."""
    contexts = []
    for part in str(text).split(","):
        item = part.strip().replace("_", "").lower()
        scale = 1024 if item.endswith("k") else 1
        digits = item[:-1] if scale > 1 else item
        if not digits.isdigit() or int(digits) == 0:
            raise InputError(
                f"--context {part.strip()!r}: expected positive token counts, e.g. 8192,32768"
            )
        contexts.append(int(digits) * scale)
    return tuple(contexts)


Opt = typer.Option


def size_command(
    model: Annotated[str, Opt("--model", "-m", help=(
        f"Preset ({', '.join(PRESETS)}), a config.json, or a directory holding one."))],
    gpu: Gpu = DEFAULT_GPU,
    hbm_gb: HbmGb = None,
    gpus: Annotated[Optional[int], Opt(help=(
        "GPUs in the node (default TP*PP); extra GPUs hold data-parallel replicas."))] = None,
    tp: Annotated[int, Opt(help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, Opt(help="Pipeline-parallel degree.")] = 1,
    context: Annotated[Optional[str], Opt(help=(
        "Comma-separated trajectory lengths in tokens (k = 1024); default "
        "8192,32768,131072 within the model's window."))] = None,
    kv_dtype: Annotated[Optional[str], Opt(help=(
        "KV dtype: fp32, bf16, fp16, fp8, fp4 (default: the model's served dtype)."))] = None,
    weight_dtype: Annotated[Optional[str], Opt(help=(
        "Weight dtype (default: the checkpoint's; fp8 for FP8 checkpoints)."))] = None,
    weights_gb: WeightsGb = None,
    reserve_gb: ReserveGb = None,
    headroom: Headroom = None,
    mem_fraction: Annotated[Optional[float], Opt("--mem-fraction", help=(
        "Budget with SGLang's mem_fraction_static rule at this fraction instead."))] = None,
    page_size: Annotated[int, Opt(help="Tokens per page (block).")] = 16,
    batch: Annotated[Optional[int], Opt(help=(
        "Live sequences: report their expected tail waste and its share of the pool."))] = None,
    mean_length: Annotated[Optional[int], Opt(help=(
        "Mean trajectory length: compare static worst-case reservation with paging."))] = None,
    max_context: Annotated[Optional[int], Opt(help=(
        "Override the model's window (max_position_embeddings), e.g. for RoPE scaling."))] = None,
    json_output: Annotated[bool, Opt("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Parse options, build the SizeRequest, print the report. InputError on bad input."""
    geometry = resolve_model(model)
    if max_context is not None:
        if max_context < 1:
            raise InputError(f"--max-context must be positive, got {max_context}")
        geometry = replace(geometry, max_context=max_context)
    contexts = parse_contexts(context) if context is not None else default_contexts(geometry)
    _check_window(geometry, contexts)
    hardware = hardware_budget(gpu=gpu, hbm_gb=hbm_gb, weights_gb=weights_gb,
                               reserve_gb=reserve_gb, headroom=headroom)
    request = SizeRequest(
        model=geometry,
        gpu=hardware.gpu,
        contexts=contexts,
        gpus=gpus,
        tp=tp,
        pp=pp,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        weights_bytes=hardware.weights_total_bytes,
        reserve_bytes=hardware.reserve_bytes,
        headroom=hardware.headroom,
        given=given(hardware),
        mem_fraction_static=mem_fraction,
        page_size=page_size,
        batch=batch,
        mean_length=mean_length,
    )
    report = build_size_report(request)
    if json_output:
        from kvctl.cli.output import print_json

        print_json(report)
        return
    from kvctl.cli.output import console
    from kvctl.cli.size_render import render_size_report

    console().print(render_size_report(report))


def _check_window(geometry, contexts: tuple[int, ...]) -> None:
    """InputError for a context beyond the window, naming a same-geometry preset that fits."""
    longest = max(contexts)
    try:
        geometry.check_context(longest)
    except InputError as err:
        hint = "--max-context overrides it for a longer, RoPE-scaled deployment"
        alternatives = presets_with_same_kv(geometry, longest)
        if alternatives:
            window = PRESETS[alternatives[0]].max_context
            hint = (f"preset {alternatives[0]} has the same geometry with a {window:,}-token "
                    f"window; {hint}")
        raise InputError(f"{err}; {hint}") from None

"""Size the KV cache: bytes per token, pool, pages, and how many trajectories fit per context.

Pure Python: imports neither torch nor sglang (tests/unit/test_size_imports.py checks).
The command parses options, builds a SizeRequest, and renders the SizeReport as a Rich
table or, with --json, as the report's dataclasses in JSON.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kvctl.errors import InputError
from kvctl.sizing.hardware import resolve_gpu, with_capacity
from kvctl.sizing.models import PRESETS, presets_with_same_kv, resolve_model
from kvctl.sizing.size_report import (
    DEFAULT_RESERVE_BYTES,
    SizeReport,
    SizeRequest,
    build_size_report,
    default_contexts,
)
from kvctl.util.units import fmt_bytes, fmt_pct

if TYPE_CHECKING:
    from rich.console import Group

_UNITS = {
    "": 10**9, "gb": 10**9, "g": 10**9, "mb": 10**6, "tb": 10**12,
    "gib": 2**30, "mib": 2**20, "tib": 2**40, "b": 1,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
_SIZE_HELP = "GB (10^9 bytes), or with a unit: 80GiB, 512MiB"


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


_GPUS = "A100-80GB, H100-SXM, H200, B200, L40S, MI300X"
Opt = typer.Option


def size_command(
    model: Annotated[str, Opt("--model", "-m", help=(
        "Preset name (e.g. Llama-3.1-70B), a config.json, or a directory holding one."))],
    gpu: Annotated[str, Opt(help=f"GPU preset: {_GPUS}.")] = "H100-SXM",
    hbm_gb: Annotated[Optional[str], Opt("--hbm-gb", help=(
        f"Memory per GPU, overriding the preset's; {_SIZE_HELP}."))] = None,
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
    weights_gb: Annotated[Optional[str], Opt("--weights-gb", help=(
        f"Whole-model weights instead of params x dtype, split over TP*PP; {_SIZE_HELP}."))] = None,
    reserve_gb: Annotated[Optional[str], Opt("--reserve-gb", help=(
        "Runtime reserve per GPU (activations, CUDA context, NCCL buffers); default 2.5 "
        f"(seed 003 napkin math 0.1/0.3); {_SIZE_HELP}."))] = None,
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
    spec = resolve_gpu(gpu)
    if hbm_gb is not None:
        spec = with_capacity(spec, parse_size(hbm_gb, "--hbm-gb"))
    request = SizeRequest(
        model=geometry,
        gpu=spec,
        contexts=contexts,
        gpus=gpus,
        tp=tp,
        pp=pp,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        weights_bytes=None if weights_gb is None else parse_size(weights_gb, "--weights-gb"),
        reserve_bytes=(DEFAULT_RESERVE_BYTES if reserve_gb is None
                       else parse_size(reserve_gb, "--reserve-gb", allow_zero=True)),
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


# ----- rendering (people) ---------------------------------------------------------------


def render_size_report(report: SizeReport) -> Group:
    """The report as Rich renderables: title, summary grid, per-context table(s), notes."""
    from rich.console import Group
    from rich.text import Text

    m = report.model
    title = Text.assemble(
        (m.name, "bold"),
        f" on {report.gpus} x {report.gpu.name}   TP {report.tp}  PP {report.pp}  "
        f"replicas {report.replicas}  KV {report.kv_dtype}  page {report.page_size}",
    )
    parts = [title, _summary_grid(report), _context_table(report)]
    static = _static_table(report)
    if static is not None:
        parts.append(static)
    parts.append(Text("\n".join(f"- {note}" for note in report.notes), style="dim"))
    return Group(*parts)


def _summary_grid(report: SizeReport):
    from rich.table import Table

    m, b = report.model, report.budget
    if m.attention == "mla":
        heads = f"MLA latent {m.kv_lora_rank}+{m.qk_rope_head_dim}"
    else:
        dims = (f"head_dim {m.head_dim}" if m.head_dim == m.v_head_dim
                else f"K/V head_dim {m.head_dim}/{m.v_head_dim}")
        heads = (f"{m.attention.upper()} {m.num_attention_heads} query / "
                 f"{m.num_kv_heads} KV heads, {dims}")
    params = f", {m.num_params / 1e9:.2f}B params" if m.num_params else ""
    window = (f", sliding {m.sliding_window:,} on {m.sliding_layers}/{m.num_layers} layers"
              if m.sliding_layers else "")
    runtime = ("runtime reserve" if b.rule == "reserve"
               else f"slack (mem_fraction_static {b.mem_fraction_static})")
    plural = "s" if report.gpus > 1 else ""
    tail = (f"(P-1)/2 = {report.tail_slots_per_sequence:g} slots = "
            f"{fmt_bytes(report.tail_bytes_per_sequence_per_rank)} per sequence per GPU")
    if report.batch_tail is not None:
        t = report.batch_tail
        tail += (f"; {t.sequences:,} sequences: {fmt_bytes(t.total_bytes)} = "
                 f"{fmt_pct(t.share_of_pool, 2)} of the pool")

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold cyan", no_wrap=True)
    grid.add_column()
    grid.add_row("Model", f"{m.num_layers} layers, {heads}{params}, "
                          f"window {m.max_context:,}{window}")
    grid.add_row("KV per token", f"{fmt_bytes(report.bytes_per_token_model)} model-wide, "
                                 f"{fmt_bytes(report.bytes_per_token_per_rank)} per GPU "
                                 f"({report.bytes_per_token_per_rank:,} B)")
    grid.add_row("Memory per GPU", f"{fmt_bytes(b.hbm_bytes)} - "
                                   f"{fmt_bytes(b.weights_bytes)} weights"
                                   f" - {fmt_bytes(b.runtime_bytes)} {runtime}"
                                   f" = {fmt_bytes(b.pool_bytes)} KV pool")
    grid.add_row("KV pool", f"{fmt_bytes(report.pool_bytes_node)} on {report.gpus} GPU{plural}; "
                            f"per GPU {report.pool_tokens_per_rank:,} tokens = "
                            f"{report.pool_pages_per_rank:,} pages of "
                            f"{fmt_bytes(report.page_bytes_per_rank)}")
    grid.add_row("Tail waste", tail)
    return grid


def _context_table(report: SizeReport):
    from rich.table import Table

    capped = any(r.max_trajectories != r.max_trajectories_uncapped for r in report.contexts)
    where = f" (all {report.gpus} GPUs)" if report.gpus > 1 else ""
    table = Table(title=f"Trajectories that fit, per context{where}", title_justify="left",
                  title_style="bold", header_style="bold")
    for name in ("Context", "KV/traj", "per GPU", "pages"):
        table.add_column(name, justify="right")
    table.add_column("Max traj", justify="right", style="bold green")
    if capped:
        table.add_column("uncapped", justify="right")
    table.add_column("tail@max", justify="right")
    for r in report.contexts:
        cells = [f"{r.context:,}", fmt_bytes(r.trajectory_bytes_model),
                 fmt_bytes(r.trajectory_bytes_per_rank), f"{r.pages_per_trajectory:,}",
                 f"{r.max_trajectories:,}"]
        if capped:
            cells.append(f"{r.max_trajectories_uncapped:,}")
        cells.append(fmt_pct(r.tail_share_at_max, 2))
        table.add_row(*cells)
    return table


def _static_table(report: SizeReport):
    from rich.table import Table

    rows = [r.static_vs_paged for r in report.contexts if r.static_vs_paged is not None]
    if not rows:
        return None
    table = Table(title=f"Static worst-case reservation vs paging, mean length "
                        f"{rows[0].mean_tokens:,}",
                  title_justify="left", title_style="bold", header_style="bold")
    for name in ("Reserve", "per GPU", "static max", "used", "paged max", "used "):
        table.add_column(name, justify="right")
    for s in rows:
        table.add_row(f"{s.max_tokens:,}", fmt_bytes(s.reservation_bytes),
                      f"{s.static_trajectories * report.replicas:,}", fmt_pct(s.static_efficiency),
                      f"{s.paged_trajectories * report.replicas:,}", fmt_pct(s.paged_efficiency))
    return table

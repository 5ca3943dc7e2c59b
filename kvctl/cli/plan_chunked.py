"""`kvctl plan chunked-prefill`: TTFT and ITL under a token budget (seed 003 napkin math 0.5)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.cli.budget_options import WeightsGb
from kvctl.cli.output import to_jsonable
from kvctl.cli.plan_assumptions import option
from kvctl.cli.plan_common import Rendered, emit, ms, table
from kvctl.cli.plan_model import params_count, resolve_geometry, resolve_gpu, weight_bytes_total
from kvctl.cli.size_text import parse_size
from kvctl.errors import InputError
from kvctl.sizing.plan.chunked_prefill import ChunkedPrefillPlan, plan_chunked_prefill


def chunked_prefill_command(
    prompt: Annotated[int, typer.Option(help="Prompt tokens S of the arriving request.")],
    decode_batch: Annotated[int, typer.Option(help="Running decode streams B.")],
    chunk: Annotated[int, typer.Option(help="Prefill chunk C (SGLang --chunked-prefill-size).")] = 512,
    model: Annotated[Optional[str], typer.Option(help="Model preset or config.json (parameters, weight dtype).")] = None,
    params_b: Annotated[Optional[float], typer.Option(help="Parameters in billions (overrides the model's).")] = None,
    weights_gb: WeightsGb = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU name for peak FLOP/s and HBM bandwidth.")] = None,
    peak_tflops: Annotated[Optional[float], typer.Option(help="Dense 16-bit peak per device, TFLOP/s.")] = None,
    hbm_tbps: Annotated[Optional[float], typer.Option(help="HBM bandwidth per device, TB/s.")] = None,
    tp: Annotated[int, typer.Option(help="Devices sharing weights and FLOPs (tensor parallel).")] = 1,
    decode_mfu: Annotated[float, typer.Option(help="Achieved MFU of decode compute.")] = 0.5,
    prefill_mfu: Annotated[float, typer.Option(help="Achieved MFU of prefill and mixed iterations.")] = 0.6,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Model iteration time, TTFT and ITL with monolithic versus chunked prefill (seed 003 napkin 0.5)."""
    geometry = resolve_geometry(model) if model is not None else None
    params = params_count(geometry, params_b)
    weights = (float(parse_size(weights_gb, "--weights-gb", default_unit="gb", allow_zero=False)) if weights_gb is not None
               else weight_bytes_total(geometry, params, None))
    peak, bandwidth = _device_rates(gpu, peak_tflops, hbm_tbps)
    plan = plan_chunked_prefill(
        params=params, weight_bytes=weights, peak_flops=peak, memory_bandwidth=bandwidth,
        decode_batch=decode_batch, prompt_tokens=prompt, chunk_tokens=chunk,
        decode_mfu=decode_mfu, prefill_mfu=prefill_mfu, devices=tp,
    )
    assumptions = (
        option("decode MFU", f"{decode_mfu:g}", "--decode-mfu", given=decode_mfu != 0.5,
               default_source="seed 003 napkin 0.5"),
        option("prefill MFU", f"{prefill_mfu:g}", "--prefill-mfu", given=prefill_mfu != 0.6,
               default_source="seed 003 napkin 0.5"),
    )
    rendered = _render(plan)
    emit(as_json, {**to_jsonable(plan), "assumptions": to_jsonable(assumptions)},
         Rendered(rendered.title, rendered.tables, rendered.why, assumptions))


def _device_rates(gpu: Optional[str], peak_tflops: Optional[float], hbm_tbps: Optional[float]) -> tuple[float, float]:
    """Per-device peak FLOP/s and HBM bytes/s: explicit numbers win over the GPU's spec."""
    spec = resolve_gpu(gpu) if gpu is not None else None
    if peak_tflops is None and spec is None:
        raise InputError("give --gpu or --peak-tflops")
    if hbm_tbps is None and spec is None:
        raise InputError("give --gpu or --hbm-tbps")
    peak = peak_tflops * 1e12 if peak_tflops is not None else float(spec.peak_bf16_flops)
    bandwidth = hbm_tbps * 1e12 if hbm_tbps is not None else float(spec.hbm_bandwidth_bytes_per_s)
    return peak, bandwidth


def _render(p: ChunkedPrefillPlan) -> Rendered:
    rows = [
        ["weight streaming per iteration", ms(p.weight_stream_seconds)],
        [f"decode compute ({p.decode_batch} tokens)", ms(p.decode_compute_seconds)],
        [f"decode iteration = baseline ITL ({p.decode_bound}-bound)", ms(p.decode_iteration_seconds)],
        [f"monolithic prefill = TTFT = ITL spike ({p.prompt_tokens} tokens)", ms(p.monolithic_prefill_seconds)],
        ["ITL degradation, monolithic", f"{p.monolithic_itl_degradation:.1f}x"],
        [f"chunked: {p.chunks} iterations of {p.token_budget} tokens ({p.chunk_iteration_bound}-bound)",
         ms(p.chunk_iteration_seconds)],
        ["chunked TTFT", ms(p.chunked_ttft_seconds)],
        ["chunked max ITL", ms(p.chunked_max_itl_seconds)],
        ["balanced chunk (compute = weight streaming)", f"{p.balanced_chunk_tokens} tokens"],
    ]
    ttft_cost = p.chunked_ttft_seconds / p.monolithic_prefill_seconds - 1
    why = [
        f"chunking caps the decode stall at {ms(p.chunked_max_itl_seconds)} instead of "
        f"{ms(p.monolithic_prefill_seconds)}, for {ttft_cost:+.1%} TTFT",
        f"a chunk of about {p.balanced_chunk_tokens} tokens balances compute against weight streaming "
        f"with {p.decode_batch} decode streams",
    ]
    return Rendered(f"chunked prefill, chunk {p.chunk_tokens}, {p.devices} device(s)",
                    [table(None, ["quantity", "value"], rows)], why)

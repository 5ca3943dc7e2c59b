"""`kvctl plan recommend`: SGLang launch flags for a model, GPU set and agent workload."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.cli.output import console, to_jsonable
from kvctl.cli.plan_common import Rendered, emit, gb_to_bytes, table
from kvctl.cli.plan_model import check_context, params_count, resolve_gpu, token_bytes
from kvctl.errors import InputError
from kvctl.sizing.plan.capacity import hbm_split, plan_capacity
from kvctl.sizing.plan.capacity_workload import admission_ceiling
from kvctl.sizing.plan.links import retention_tiers
from kvctl.sizing.plan.recommend import Recommendation, recommend
from kvctl.sizing.plan.retention import plan_retention
from kvctl.sizing.pool import weights_per_rank

_GPU_LINKS = {"PCIe Gen4 x16": "pcie-gen4", "PCIe Gen5 x16": "pcie-gen5"}


def recommend_command(
    model: Annotated[str, typer.Option(help="Model preset or config.json (also the --model-path shown).")],
    gpu: Annotated[str, typer.Option(help="GPU name (HBM, bandwidth, peak FLOP/s, host link).")],
    context: Annotated[int, typer.Option(help="Average context tokens per trajectory.")],
    output: Annotated[int, typer.Option(help="Average output tokens per trajectory.")],
    gpus: Annotated[Optional[int], typer.Option(help="Devices (default TP x PP).")] = None,
    tp: Annotated[int, typer.Option(help="Tensor parallelism.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline parallelism.")] = 1,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype (default: the model's).")] = None,
    hbm_gb: Annotated[Optional[float], typer.Option(help="HBM per device, GB (overrides the GPU's).")] = None,
    runtime_gb: Annotated[float, typer.Option(help="Activations + runtime reserve per device, GB (default: seed 003 napkin 0.7).")] = 4.5,
    headroom: Annotated[float, typer.Option(help="Free-block margin (fraction).")] = 0.10,
    tau_high: Annotated[float, typer.Option(help="Admission ceiling on U_KV.")] = 0.88,
    shared_tokens: Annotated[int, typer.Option(help="Prefix tokens every trajectory shares.")] = 0,
    generation_seconds: Annotated[float, typer.Option(help="Generation time per turn, s.")] = 5.0,
    tool_wait_seconds: Annotated[float, typer.Option(help="Typical tool wait per turn, s.")] = 45.0,
    itl_target_ms: Annotated[float, typer.Option(help="Inter-token latency target, ms.")] = 50.0,
    prefill_mfu: Annotated[float, typer.Option(help="Achieved MFU of prefill / mixed iterations.")] = 0.6,
    host_gb: Annotated[Optional[float], typer.Option(help="Host DRAM per device HiCache may use, GB (caps --hicache-size).")] = None,
    validate_with_replay: Annotated[Optional[Path], typer.Option(
        "--validate-with-replay", metavar="PATH",
        help=("Replay this scenario (.yaml) or Mooncake trace (.jsonl) through SGLang's radix "
              "cache on CPU with the recommended settings; print it beside the estimate."))] = None,
    limit: Annotated[Optional[int], typer.Option(help=(
        "Bound the replay: the first N sessions of a scenario, N requests of a trace."))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Recommend SGLang launch flags (memory fraction, page size, eviction, batch, chunk, HiCache) with reasons."""
    if limit is not None and validate_with_replay is None:
        raise InputError("--limit bounds the replay of --validate-with-replay; give that too")
    devices = gpus if gpus is not None else tp * pp
    tokens = token_bytes(model=model, bytes_per_token=None, kv_dtype=kv_dtype, tp=tp, pp=pp)
    check_context(tokens.geometry, context + output)
    spec = resolve_gpu(gpu)
    params = params_count(tokens.geometry, None)
    weights = weights_per_rank(round(params), tokens.geometry.weight_dtype, tp, pp)
    hbm = gb_to_bytes(hbm_gb, name="--hbm-gb") if hbm_gb is not None else int(spec.hbm_bytes)
    split = hbm_split(hbm_bytes=hbm, weights_bytes=weights,
                      runtime_bytes=gb_to_bytes(runtime_gb, name="--runtime-gb"), devices=devices)
    plan = plan_capacity(split=split, bytes_per_token=tokens.model, bytes_per_token_per_device=tokens.per_device,
                         tp=tp, pp=pp, headroom=headroom, context_tokens=context, output_tokens=output,
                         shared_tokens=shared_tokens)
    tiers = retention_tiers(devices=tp * pp, primary_link=_GPU_LINKS.get(spec.host_link_name, "pcie-gen5"))
    retention = plan_retention(context_tokens=context, bytes_per_token=tokens.model, params=params,
                               prefill_flops=0.45 * float(spec.peak_bf16_flops) * tp * pp, tiers=tiers)
    advice = recommend(
        plan=plan, admission=admission_ceiling(plan, tau_high=tau_high), host_tier=retention.tiers[0],
        params=params, peak_flops_per_device=float(spec.peak_bf16_flops),
        weight_stream_seconds=weights / float(spec.hbm_bandwidth_bytes_per_s),
        tool_wait_seconds=tool_wait_seconds, generation_seconds=generation_seconds,
        itl_target_seconds=itl_target_ms / 1e3, prefill_mfu=prefill_mfu,
        host_budget_bytes=gb_to_bytes(host_gb, name="--host-gb") if host_gb is not None else None,
    )
    launch = ["python", "-m", "sglang.launch_server", "--model-path", _model_path(model, tokens.geometry),
              "--tp", str(tp)]
    if pp > 1:
        launch += ["--pp", str(pp)]
    launch += list(advice.launch_args)
    document = {**to_jsonable(advice), "launch_args": list(advice.launch_args),
                "command": shlex.join(launch), "capacity": to_jsonable(plan)}
    if validate_with_replay is None:
        emit(as_json, document, _render(advice, shlex.join(launch), model, gpu, devices))
        return
    validation = _replay(validate_with_replay, advice, plan, model=model, gpu=gpu,
                         devices=devices, tp=tp, pp=pp, tau_high=tau_high,
                         prefill_mfu=prefill_mfu, limit=limit, progress=not as_json)
    document["validation"] = _validation_document(validation)
    emit(as_json, document, _render(advice, shlex.join(launch), model, gpu, devices))
    if not as_json:
        _print_validation(validation)


def _model_path(spec: str, geometry) -> str:
    """The Hugging Face repo of a preset (models.py records it in `source`), else the spec."""
    match = re.fullmatch(r"preset .+ \((?P<repo>[^()\s]+/[^()\s]+)\)", geometry.source)
    return match.group("repo") if match else spec


def _render(advice: Recommendation, command: str, model: str, gpu: str, devices: int) -> Rendered:
    rows = ([a.flag, "(off)" if a.value is None else (a.value or "on")] for a in advice.flags)
    why = [f"{a.flag}: {a.reason}" for a in advice.flags]
    why.append(f"launch: {command}")
    return Rendered(f"SGLang flags for {model} on {devices} x {gpu}",
                    [table(None, ["flag", "value"], rows)], why)


# ----- --validate-with-replay (the engine is imported only here) ---------------------------


def _replay(path: Path, advice: Recommendation, plan, *, model: str, gpu: str, devices: int,
            tp: int, pp: int, tau_high: float, prefill_mfu: float, limit: int | None,
            progress: bool):
    """Run the replay (a progress bar on a TTY); returns kvctl.replay.validate's result."""
    from kvctl.cli.replay import ProgressBar
    from kvctl.replay.engine_setup import Deployment
    from kvctl.replay.validate import validate_with_replay

    deployment = Deployment(model=model, gpu=gpu, gpus=devices, tp=tp)
    with ProgressBar(progress, "replay") as bar:
        return validate_with_replay(
            workload=str(path), recommendation=advice, plan=plan, deployment=deployment,
            tau_high=tau_high, prefill_mfu=prefill_mfu, pp=pp, limit=limit,
            on_progress=bar.replay if bar.enabled else None)


def _validation_document(validation) -> dict:
    """The `validation` object of --json: what ran, the rows, and the full replay report."""
    target = {k: v for k, v in to_jsonable(validation.target).items() if k != "mappings"}
    return {
        "workload": validation.workload,
        "replayed_with": list(validation.replayed_with),
        "target": target,
        "settings": validation.settings,
        "rows": [to_jsonable(row) for row in validation.rows],
        "figures": to_jsonable(validation.figures),
        "notes": list(validation.notes),
        "report": validation.report.to_dict(),
    }


def _print_validation(validation) -> None:
    """The "replayed with" lines, the side-by-side table, and the notes below it."""
    out = console()
    workload = validation.workload
    out.print(f"\nanalytic estimate vs replay of {workload['name']} ({workload['kind']}, "
              f"{validation.figures.requests:,} requests) through SGLang's radix cache on CPU",
              highlight=False, soft_wrap=True)
    for line in validation.replayed_with:
        out.print(f"replayed with: {line}", highlight=False, soft_wrap=True)
    rows = [(r.quantity, r.analytic, r.replayed, r.why) for r in validation.rows]
    result = table(None, ["quantity", "analytic estimate", "replayed (modeled)", "why they differ"],
                   rows)
    result.columns[-1].justify = "left"
    result.columns[-1].no_wrap = False  # on a terminal the reasons wrap, the numbers never do
    emit(False, {}, Rendered("side by side (replayed figures are modeled: virtual clock)",
                             [result]))
    notes = [f"not the same quantity: {r.quantity}" for r in validation.rows if not r.comparable]
    notes += list(validation.notes)
    if not validation.report.integrity.ok:
        notes += [f"replay integrity FAILED: {p}" for p in validation.report.integrity.problems]
    for line in notes:
        out.print(f"note: {line}", highlight=False, soft_wrap=True)

"""`kvctl plan recommend`: SGLang launch flags for a model, GPU set and agent workload; with
--trace, the fewest replicas and the router that meet an SLO (kvctl/cli/plan_fleet.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.cli.budget_options import (
    Gpu,
    HbmGb,
    Headroom,
    ReserveGb,
    RuntimeGbAlias,
    hardware_budget,
)
from kvctl.cli.output import console, to_jsonable
from kvctl.cli.plan_assumptions import plan_assumptions, tool_waits, weights_source
from kvctl.cli.plan_common import Rendered, emit, table
from kvctl.cli.plan_model import check_context, params_count, token_bytes
from kvctl.cli.size_text import parse_size
from kvctl.errors import InputError
from kvctl.sizing.budget import DEFAULT_GPU, DEFAULT_TAU_HIGH, Assumption
from kvctl.sizing.plan.capacity import hbm_split, plan_capacity
from kvctl.sizing.plan.capacity_workload import admission_ceiling
from kvctl.sizing.plan.links import retention_tiers
from kvctl.sizing.plan.recommend import Recommendation, recommend
from kvctl.sizing.plan.retention import plan_retention
from kvctl.sizing.pool import weights_per_rank

_GPU_LINKS = {"PCIe Gen4 x16": "pcie-gen4", "PCIe Gen5 x16": "pcie-gen5"}


def recommend_command(
    model: Annotated[Optional[str], typer.Option(help=(
        "Model preset or config.json (also the --model-path shown); with --trace, the modeled "
        "model of each replica (default Llama-3-8B)."))] = None,
    context: Annotated[Optional[int], typer.Option(help=(
        "Average context tokens per trajectory (flag mode; not with --trace)."))] = None,
    output: Annotated[Optional[int], typer.Option(help=(
        "Average output tokens per trajectory (flag mode; not with --trace)."))] = None,
    gpu: Gpu = DEFAULT_GPU,
    gpus: Annotated[Optional[int], typer.Option(help="Devices (default TP x PP).")] = None,
    tp: Annotated[int, typer.Option(help="Tensor parallelism.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline parallelism.")] = 1,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype (default: the model's).")] = None,
    hbm_gb: HbmGb = None,
    reserve_gb: ReserveGb = None,
    runtime_gb: RuntimeGbAlias = None,
    headroom: Headroom = None,
    tau_high: Annotated[float, typer.Option(help="Admission ceiling on U_KV.")] = DEFAULT_TAU_HIGH,
    shared_tokens: Annotated[int, typer.Option(help="Prefix tokens every trajectory shares.")] = 0,
    generation_seconds: Annotated[Optional[float], typer.Option(
        help="Generation time per turn, s (default 5).")] = None,
    tool_wait_seconds: Annotated[Optional[float], typer.Option(help=(
        "Typical tool wait per turn, s; sizes HiCache by Little's law (without it HiCache "
        "is left off)."))] = None,
    itl_target_ms: Annotated[float, typer.Option(help="Inter-token latency target, ms.")] = 50.0,
    prefill_mfu: Annotated[float, typer.Option(help="Achieved MFU of prefill / mixed iterations.")] = 0.6,
    host_gb: Annotated[Optional[str], typer.Option(help="Host DRAM per device HiCache may use (caps --hicache-size); GB, or with a unit.")] = None,
    validate_with_replay: Annotated[Optional[Path], typer.Option(
        "--validate-with-replay", metavar="PATH",
        help=("Replay this scenario (.yaml) or Mooncake trace (.jsonl) through SGLang's radix "
              "cache on CPU with the recommended settings; print it beside the estimate."))] = None,
    limit: Annotated[Optional[int], typer.Option(help=(
        "Bound the replay: the first N sessions of a scenario, N requests of a trace "
        "(--validate-with-replay, or --trace)."))] = None,
    trace: Annotated[Optional[Path], typer.Option(help=(
        "Fleet mode: a Mooncake trace (.jsonl); answers the fewest replicas and the router "
        "meeting --slo, each candidate run as a fleet replay (docs/plan.md)."))] = None,
    slo: Annotated[Optional[list[str]], typer.Option(help=(
        "With --trace, repeatable KEY=VALUE: ttft-p99, ttft-p50, e2e-p99, e2e-p50 (2s, 500ms) "
        "or hit-rate (a minimum: 40% or 0.4)."))] = None,
    max_replicas: Annotated[int, typer.Option(help=(
        "With --trace: the most replicas tried (at most 32)."))] = 8,
    routers: Annotated[Optional[str], typer.Option(help=(
        "With --trace: comma list of router policies (default round_robin,power_of_two,"
        "cache_aware)."))] = None,
    pool_tokens: Annotated[Optional[int], typer.Option(help=(
        "With --trace: each replica's KV pool in tokens (0 = unbounded), as kvctl replay."))
    ] = None,
    pool_gb: Annotated[Optional[float], typer.Option(help=(
        "With --trace: each replica's KV pool in GB of --model's KV, as kvctl replay."))] = None,
    cost_model: Annotated[Optional[Path], typer.Option(help=(
        "With --trace: a `kvctl calibrate` step-cost model as the replay clock (default: the "
        "roofline)."))] = None,
    page_size: Annotated[Optional[int], typer.Option(help=(
        "With --trace: tokens per page (default 16)."))] = None,
    max_running: Annotated[Optional[int], typer.Option(help=(
        "With --trace: max running requests per replica."))] = None,
    eviction: Annotated[Optional[str], typer.Option(help=(
        "With --trace: SGLang eviction policy (default lru)."))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Recommend SGLang launch flags (memory fraction, page size, eviction, batch, chunk, HiCache) with reasons; with --trace, the fewest replicas and router meeting an SLO."""
    fleet_given = [flag for flag, value in (
        ("--slo", slo), ("--routers", routers), ("--pool-tokens", pool_tokens),
        ("--pool-gb", pool_gb), ("--cost-model", cost_model), ("--page-size", page_size),
        ("--max-running", max_running), ("--eviction", eviction)) if value is not None]
    if max_replicas != 8:
        fleet_given.append("--max-replicas")
    if trace is not None:
        flag_only = [flag for flag, value in (
            ("--context", context), ("--output", output),
            ("--validate-with-replay", validate_with_replay), ("--gpus", gpus), ("--pp", pp if pp != 1 else None),
            ("--kv-dtype", kv_dtype), ("--tool-wait-seconds", tool_wait_seconds),
            ("--host-gb", host_gb)) if value is not None]
        if flag_only:
            raise InputError(f"{', '.join(flag_only)} size SGLang's flags for one server; "
                             "--trace answers the fleet question: drop one or the other")
        return _fleet(trace, model=model, gpu=gpu, tp=tp, slo=slo or [], routers=routers,
                      max_replicas=max_replicas, pool_tokens=pool_tokens, pool_gb=pool_gb,
                      cost_model=cost_model, page_size=page_size, max_running=max_running,
                      eviction=eviction, limit=limit, as_json=as_json)
    if fleet_given:
        raise InputError(f"{', '.join(fleet_given)} go with --trace (the fleet question)")
    if model is None or context is None or output is None:
        raise InputError("give --model, --context and --output (SGLang flags for one server), "
                         "or --trace and --slo (the fewest replicas meeting an SLO)")
    if limit is not None and validate_with_replay is None:
        raise InputError("--limit bounds the replay of --validate-with-replay; give that too")
    devices = gpus if gpus is not None else tp * pp
    tokens = token_bytes(model=model, bytes_per_token=None, kv_dtype=kv_dtype, tp=tp, pp=pp)
    check_context(tokens.geometry, context + output)
    hardware = hardware_budget(gpu=gpu, hbm_gb=hbm_gb, reserve_gb=reserve_gb, runtime_gb=runtime_gb,
                               headroom=headroom)
    spec = hardware.gpu
    waits = tool_waits(tool_wait_seconds, generation_seconds)
    params = params_count(tokens.geometry, None)
    weights = weights_per_rank(round(params), tokens.geometry.weight_dtype, tp, pp)
    split = hbm_split(hbm_bytes=hardware.hbm_bytes, weights_bytes=weights,
                      runtime_bytes=hardware.reserve_bytes, devices=devices)
    plan = plan_capacity(split=split, bytes_per_token=tokens.model, bytes_per_token_per_device=tokens.per_device,
                         tp=tp, pp=pp, headroom=hardware.headroom, context_tokens=context, output_tokens=output,
                         shared_tokens=shared_tokens)
    tiers = retention_tiers(devices=tp * pp, primary_link=_GPU_LINKS.get(spec.host_link_name, "pcie-gen5"))
    retention = plan_retention(context_tokens=context, bytes_per_token=tokens.model, params=params,
                               prefill_flops=0.45 * float(spec.peak_bf16_flops) * tp * pp, tiers=tiers)
    advice = recommend(
        plan=plan, admission=admission_ceiling(plan, tau_high=tau_high), host_tier=retention.tiers[0],
        params=params, peak_flops_per_device=float(spec.peak_bf16_flops),
        weight_stream_seconds=weights / float(spec.hbm_bandwidth_bytes_per_s),
        tool_wait_seconds=tool_wait_seconds, generation_seconds=waits.generation_seconds,
        itl_target_seconds=itl_target_ms / 1e3, prefill_mfu=prefill_mfu,
        host_budget_bytes=parse_size(host_gb, "--host-gb", default_unit="gb", allow_zero=False) if host_gb is not None else None,
    )
    assumptions = plan_assumptions(
        hardware, weights=weights_source(None, None, tokens.geometry),
        waits=waits if tool_wait_seconds is not None else None, tau_high=tau_high,
        extra=_recommend_assumptions(tool_wait_seconds, waits, prefill_mfu, itl_target_ms))
    launch = ["python", "-m", "sglang.launch_server", "--model-path", _model_path(model, tokens.geometry),
              "--tp", str(tp)]
    if pp > 1:
        launch += ["--pp", str(pp)]
    launch += list(advice.launch_args)
    document = {**to_jsonable(advice), "launch_args": list(advice.launch_args),
                "command": shlex.join(launch), "capacity": to_jsonable(plan),
                "assumptions": to_jsonable(assumptions)}
    if validate_with_replay is None:
        emit(as_json, document, _render(advice, shlex.join(launch), model, gpu, devices, assumptions))
        return
    validation = _replay(validate_with_replay, advice, plan, model=model, gpu=gpu,
                         devices=devices, tp=tp, pp=pp, tau_high=tau_high,
                         prefill_mfu=prefill_mfu, limit=limit, progress=not as_json)
    document["validation"] = _validation_document(validation)
    emit(as_json, document, _render(advice, shlex.join(launch), model, gpu, devices, assumptions))
    if not as_json:
        _print_validation(validation)


def _fleet(trace: Path, *, model, gpu, tp, slo, routers, max_replicas, pool_tokens, pool_gb,
           cost_model, page_size, max_running, eviction, limit, as_json) -> None:
    """--trace: each replica is `kvctl replay`'s with these options; the search and its
    output are kvctl/fleet/recommend.py and kvctl/cli/plan_fleet.py."""
    from kvctl.cli.plan_fleet import fleet_recommend
    from kvctl.replay.engine_setup import DEFAULT_MODEL, Deployment
    from kvctl.replay.runner import ReplaySettings

    base = ReplaySettings(
        workload=str(trace), deployment=Deployment(model=model or DEFAULT_MODEL, gpu=gpu, tp=tp),
        pool_tokens=pool_tokens, pool_gb=pool_gb, page_size=page_size, eviction_policy=eviction,
        max_running_requests=max_running, limit=limit,
        cost_model=str(cost_model) if cost_model is not None else None)
    fleet_recommend(base, slos=slo, routers=routers, max_replicas=max_replicas,
                    json_output=as_json)


def _model_path(spec: str, geometry) -> str:
    """The Hugging Face repo of a preset (models.py records it in `source`), else the spec."""
    match = re.fullmatch(r"preset .+ \((?P<repo>[^()\s]+/[^()\s]+)\)", geometry.source)
    return match.group("repo") if match else spec


def _recommend_assumptions(tool_wait_seconds, waits, prefill_mfu: float,
                           itl_target_ms: float) -> tuple[Assumption, ...]:
    """recommend's own inputs: the tool wait (or its absence), prefill MFU, ITL target."""
    lines = []
    if tool_wait_seconds is None:
        lines.append(Assumption("tool wait", "unknown: HiCache left off",
                                "give --tool-wait-seconds"))
    lines.append(Assumption("prefill MFU", f"{prefill_mfu:g}", "--prefill-mfu" if prefill_mfu != 0.6
                            else "default: seed 003 napkin 0.5"))
    lines.append(Assumption("ITL target", f"{itl_target_ms:g} ms", "--itl-target-ms" if itl_target_ms != 50
                            else "default: kvctl's"))
    return tuple(lines)


def _render(advice: Recommendation, command: str, model: str, gpu: str, devices: int,
            assumptions=()) -> Rendered:
    rows = ([a.flag, "(off)" if a.value is None else (a.value or "on")] for a in advice.flags)
    why = [f"{a.flag}: {a.reason}" for a in advice.flags]
    why.append(f"launch: {command}")
    return Rendered(f"SGLang flags for {model} on {devices} x {gpu}",
                    [table(None, ["flag", "value"], rows)], why, assumptions)


# ----- --validate-with-replay (the engine is imported only here) ---------------------------


def _replay(path: Path, advice: Recommendation, plan, *, model: str, gpu: str, devices: int,
            tp: int, pp: int, tau_high: float, prefill_mfu: float, limit: int | None,
            progress: bool):
    """Run the replay (a progress bar on a TTY); returns kvctl.replay.validate's result."""
    from kvctl.cli.replay_common import ProgressBar
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
        # "sglang_hicache_replay" (SGLang's HiCache replayed) or "kvctl_model" (host_tier.py,
        # for offload tool waits); None when the recommendation leaves HiCache off
        "hicache_validated_by": validation.target.hicache_validated_by,
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

"""`kvctl plan capacity`: agent trajectories per deployment (seed 003 eq. 3-7, napkin math 0.7)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.cli.budget_options import (
    Gpu,
    HbmGb,
    Headroom,
    ReserveGb,
    RuntimeGbAlias,
    WeightsGb,
    hardware_budget,
)
from kvctl.cli.output import to_jsonable
from kvctl.cli.plan_assumptions import (
    DEFAULT_GENERATION_SECONDS,
    DEFAULT_TOOL_WAIT_SECONDS,
    plan_assumptions,
    tool_waits,
    weights_source,
)
from kvctl.cli.plan_common import Rendered, emit, table
from kvctl.cli.plan_model import check_context, params_count, token_bytes
from kvctl.sizing.budget import DEFAULT_GPU, DEFAULT_TAU_HIGH
from kvctl.sizing.plan.capacity import CapacityPlan, hbm_split, plan_capacity
from kvctl.sizing.plan.capacity_workload import (
    admission_ceiling,
    branching,
    demand,
    tool_wait_concurrency,
)
from kvctl.sizing.pool import weights_per_rank
from kvctl.util.units import fmt_bytes


def capacity_command(
    context: Annotated[int, typer.Option(help="Average context tokens per trajectory (M_avg).")],
    output: Annotated[int, typer.Option(help="Average output tokens per trajectory (K_avg).")],
    model: Annotated[Optional[str], typer.Option(help="Model preset or config.json.")] = None,
    bytes_per_token: Annotated[Optional[int], typer.Option(help="m_token of the whole model, instead of --model.")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype (default: the model's).")] = None,
    gpu: Gpu = DEFAULT_GPU,
    gpus: Annotated[Optional[int], typer.Option(help="Devices in the deployment (default TP x PP).")] = None,
    hbm_gb: HbmGb = None,
    tp: Annotated[int, typer.Option(help="Tensor parallelism.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline parallelism.")] = 1,
    weights_gb: WeightsGb = None,
    params_b: Annotated[Optional[float], typer.Option(help="Parameters in billions (default: the model's).")] = None,
    reserve_gb: ReserveGb = None,
    runtime_gb: RuntimeGbAlias = None,
    headroom: Headroom = None,
    shared_tokens: Annotated[int, typer.Option(help="Prefix tokens every trajectory shares (held once).")] = 0,
    sharing_factor: Annotated[Optional[float], typer.Option(help="sigma of eq. (7) (default: shared / context).")] = None,
    tau_high: Annotated[float, typer.Option(help="Admission ceiling on U_KV.")] = DEFAULT_TAU_HIGH,
    trajectories: Annotated[Optional[int], typer.Option(help="Target concurrency B for the demand check.")] = None,
    branches: Annotated[Optional[int], typer.Option(help="Branches forked from one root (tree search).")] = None,
    branch_tokens: Annotated[int, typer.Option(help="Private tokens each branch generates.")] = 2048,
    arrival_rate: Annotated[Optional[float], typer.Option(help="Trajectory turns arriving per second (Little's law).")] = None,
    generation_seconds: Annotated[Optional[float], typer.Option(
        help=f"T_generation per turn, seconds (default {DEFAULT_GENERATION_SECONDS:g}).")] = None,
    tool_wait_seconds: Annotated[Optional[float], typer.Option(
        help=f"T_tool_wait per turn, seconds (default {DEFAULT_TOOL_WAIT_SECONDS:g}, napkin 0.6).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """How many agent trajectories fit, unshared and shared, with headroom and tool waits (seed 003)."""
    devices = gpus if gpus is not None else tp * pp
    waits = tool_waits(tool_wait_seconds, generation_seconds) if arrival_rate is not None else None
    tokens = token_bytes(model=model, bytes_per_token=bytes_per_token, kv_dtype=kv_dtype, tp=tp, pp=pp)
    check_context(tokens.geometry, context + output)
    hardware = hardware_budget(gpu=gpu, hbm_gb=hbm_gb, weights_gb=weights_gb, reserve_gb=reserve_gb,
                               runtime_gb=runtime_gb, headroom=headroom)
    weights = hardware.weights_per_device(tp, pp)
    if weights is None:  # seed 003 eq. (4): N_params b_weight / (TP PP)
        params = round(params_count(tokens.geometry, params_b))
        weight_dtype = tokens.geometry.weight_dtype if tokens.geometry is not None else "bf16"
        weights = weights_per_rank(params, weight_dtype, tp, pp)
    split = hbm_split(hbm_bytes=hardware.hbm_bytes, weights_bytes=weights,
                      runtime_bytes=hardware.reserve_bytes, devices=devices)
    plan = plan_capacity(
        split=split, bytes_per_token=tokens.model, bytes_per_token_per_device=tokens.per_device,
        tp=tp, pp=pp, headroom=hardware.headroom, context_tokens=context, output_tokens=output,
        shared_tokens=shared_tokens, sharing_factor=sharing_factor,
    )
    extras = {
        "admission": admission_ceiling(plan, tau_high=tau_high),
        "demand": demand(plan, trajectories=trajectories) if trajectories is not None else None,
        "branching": branching(plan, branches=branches, branch_tokens=branch_tokens) if branches else None,
        "tool_wait": tool_wait_concurrency(plan, arrival_rate=arrival_rate, generation_seconds=waits.generation_seconds,
                                           tool_wait_seconds=waits.tool_wait_seconds) if waits else None,
    }
    assumptions = plan_assumptions(hardware, weights=weights_source(weights_gb, params_b, tokens.geometry),
                                   waits=waits, tau_high=tau_high)
    document = {**to_jsonable(plan), **to_jsonable(extras), "assumptions": to_jsonable(assumptions)}
    rendered = _render(plan, extras)
    emit(as_json, document, Rendered(rendered.title, rendered.tables, rendered.why, assumptions))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _render(plan: CapacityPlan, extras: dict) -> Rendered:
    s = plan.split
    gb = fmt_bytes  # binary units, as `kvctl size` shows them (kvctl.sizing.budget)
    split_rows = [
        ["HBM per device", gb(s.hbm_bytes)], ["weights per device", gb(s.weights_bytes)],
        ["reserve (activations, runtime)", gb(s.runtime_bytes)], ["KV pool per device (eq. 5)", gb(s.kv_pool_bytes)],
        [f"KV pool, {s.devices} devices", gb(s.node_kv_pool_bytes)],
        ["m_token (whole model / per device)", f"{plan.bytes_per_token:,} B / {plan.bytes_per_token_per_device:,} B"],
        [f"token capacity ({plan.replicas} replica(s))", f"{plan.capacity_tokens:,}"],
        [f"usable per replica ({1 - plan.headroom:.0%})", f"{plan.usable_tokens_per_replica:,}"],
    ]
    admission = extras["admission"]
    conc_rows = [
        ["unshared (eq. 6)", f"{plan.tokens_per_trajectory_unshared:,}", plan.max_trajectories_unshared,
         admission.trajectories_unshared],
        [f"shared {plan.shared_tokens:,} tokens, sigma {plan.sharing_factor:.3g} (eq. 7)",
         f"{plan.private_tokens_per_trajectory:,}", plan.max_trajectories_shared, admission.trajectories_shared],
    ]
    tables = [table("HBM split", ["quantity", "value"], split_rows),
              table("trajectories", ["workload", "tokens each", "max", f"at tau_high {admission.tau_high:g}"],
                    conc_rows)]
    why = [f"{plan.max_trajectories_unshared} trajectories of {plan.tokens_per_trajectory_unshared:,} tokens fill "
           f"the usable pool without sharing"]
    if plan.shared_tokens and plan.shared_gain is not None:
        why.append(f"holding {plan.shared_tokens:,} shared tokens once lifts that to "
                   f"{plan.max_trajectories_shared} ({plan.shared_gain:.2f}x)")
    why.append(f"admit new turns only while U_KV <= {admission.tau_high:g} "
               f"({admission.ceiling_tokens_per_replica:,} tokens per replica)")
    if extras["demand"] is not None:
        d = extras["demand"]
        tables.append(table(f"demand for {d.trajectories} trajectories", ["ledger", "bytes", "fits"], [
            ["unshared (eq. 6)", gb(d.unshared_bytes), _yes(d.fits_unshared)],
            ["shared + headroom (eq. 7)", gb(d.shared_bytes), _yes(d.fits_shared)],
            ["KV pool", gb(d.pool_bytes), ""],
        ]))
    if extras["branching"] is not None:
        b = extras["branching"]
        tables.append(table(f"branching: {b.branches} branches x {b.branch_tokens:,} tokens",
                            ["ledger", "tokens per task", "max tasks"],
                            [["root shared copy-on-write", f"{b.task_tokens:,}", b.max_tasks],
                             ["root copied per branch", f"{b.task_tokens_without_sharing:,}",
                              b.max_tasks_without_sharing]]))
        why.append(f"one task forking {b.branches} branches needs {gb(b.task_bytes)} "
                   f"(M_root + sum S_gen m_token); budget peaks, not averages")
    if extras["tool_wait"] is not None:
        t = extras["tool_wait"]
        tables.append(table("tool waits (Little's law)", ["policy", "resident trajectories", "fits"], [
            ["retain through tool waits", f"{t.resident_retained:,.1f}", _yes(t.fits_retained)],
            ["offload during tool waits", f"{t.resident_offloaded:,.1f}", _yes(t.fits_offloaded)],
        ]))
        why.append(f"retaining state through {t.tool_wait_seconds:g} s tool waits multiplies residency "
                   f"{t.inflation:.1f}x ({t.resident_retained:,.1f} vs ceiling {t.ceiling})")
    return Rendered(f"capacity: context {plan.context_tokens:,} + output {plan.output_tokens:,}, "
                    f"TP={plan.tp} PP={plan.pp}", tables, why)

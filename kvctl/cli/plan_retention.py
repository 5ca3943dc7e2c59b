"""`kvctl plan retention`: retain, offload, recompute or tier per tool class (seed 003 sec. 6)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.cli.output import to_jsonable
from kvctl.cli.plan_assumptions import option
from kvctl.cli.plan_common import Rendered, emit, ms, secs, table
from kvctl.cli.plan_model import check_context, params_count, resolve_gpu, token_bytes
from kvctl.errors import InputError
from kvctl.sizing.plan.links import NVME_DRIVE_BYTES_PER_S, retention_tiers
from kvctl.sizing.plan.retention import RetentionPlan, ToolClass, plan_retention
from kvctl.util.units import fmt_bytes


_GPU_LINKS = {"PCIe Gen4 x16": "pcie-gen4", "PCIe Gen5 x16": "pcie-gen5"}


def _tool(spec: str) -> ToolClass:
    name, _, waits = spec.partition("=")
    typical, _, minimum = waits.partition(":")
    try:
        return ToolClass(name=name.strip(), typical_wait_seconds=float(typical),
                         min_wait_seconds=float(minimum) if minimum else None)
    except ValueError:
        raise InputError(f"--tool: expected NAME=TYPICAL_SECONDS[:MIN_SECONDS], got {spec!r}") from None


def retention_command(
    context: Annotated[int, typer.Option(help="Tokens S of the paused trajectory.")],
    model: Annotated[Optional[str], typer.Option(help="Model preset or config.json.")] = None,
    bytes_per_token: Annotated[Optional[int], typer.Option(help="m_token of the whole model, instead of --model.")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype (default: the model's).")] = None,
    tp: Annotated[int, typer.Option(help="Devices holding the state; each moves 1/TP over its own link.")] = 1,
    params_b: Annotated[Optional[float], typer.Option(help="Parameters in billions (default: the model's).")] = None,
    prefill_tflops: Annotated[Optional[float], typer.Option(help="Sustained prefill rate of all TP devices, TFLOP/s.")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="GPU name: prefill rate = MFU x peak x TP.")] = None,
    mfu: Annotated[float, typer.Option(help="Sustained prefill utilization with --gpu.")] = 0.45,
    link: Annotated[Optional[str], typer.Option(help="Primary host link: pcie-gen4, pcie-gen5, nvlink-c2c (default: the GPU's, else pcie-gen5).")] = None,
    link_gbps: Annotated[Optional[float], typer.Option(help="Measured bandwidth per device link, GB/s (replaces the preset).")] = None,
    link_efficiency: Annotated[float, typer.Option(help="Sustained fraction of rated link bandwidth.")] = 1.0,
    nvme_gbps: Annotated[float, typer.Option(help="NVMe tier bandwidth, GB/s.")] = NVME_DRIVE_BYTES_PER_S / 1e9,
    dram_price_ratio: Annotated[float, typer.Option(help="Shadow price ratio mu_DRAM / mu_HBM, in [0, 1).")] = 0.0,
    stall_ms: Annotated[float, typer.Option(help="Resume stall tolerated, ms (dT_stall).")] = 0.0,
    tier_after: Annotated[float, typer.Option(help="Waits at least this long (s) may go to NVMe.")] = 120.0,
    tool: Annotated[Optional[list[str]], typer.Option(help="Tool class NAME=TYPICAL_S[:MIN_S] (repeat).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Retain, offload, recompute or tier a paused trajectory, per link and tool class (seed 003)."""
    tokens = token_bytes(model=model, bytes_per_token=bytes_per_token, kv_dtype=kv_dtype, tp=1, pp=1)
    check_context(tokens.geometry, context)
    params = params_count(tokens.geometry, params_b)
    if (prefill_tflops is None) == (gpu is None):
        raise InputError("give exactly one of --prefill-tflops or --gpu")
    spec = resolve_gpu(gpu) if gpu is not None else None
    rate = prefill_tflops * 1e12 if spec is None else mfu * float(spec.peak_bf16_flops) * tp
    link_given = link is not None
    if link is None:
        link = _GPU_LINKS.get(spec.host_link_name, "pcie-gen5") if spec is not None else "pcie-gen5"
    tiers = retention_tiers(
        devices=tp, primary_link=link,
        primary_link_bytes_per_s=link_gbps * 1e9 if link_gbps is not None else None,
        nvme_bytes_per_s=nvme_gbps * 1e9, efficiency=link_efficiency,
    )
    plan = plan_retention(
        context_tokens=context, bytes_per_token=tokens.model, params=params, prefill_flops=rate,
        tiers=tiers, tools=tuple(_tool(spec) for spec in tool or ()),
        dram_price_ratio=dram_price_ratio, stall_seconds=stall_ms / 1e3, tier_after_seconds=tier_after,
    )
    primary = plan.tiers[0]
    document = {
        "reload_seconds": primary.reload_seconds,
        "recompute_seconds": plan.recompute_seconds,
        "round_trip_seconds": primary.round_trip_seconds,
        "break_even_seconds": primary.break_even_seconds,
        "speedup_vs_recompute": primary.speedup_vs_recompute,
        **to_jsonable(plan),
    }
    assumptions = _assumptions(spec, mfu, tp, link, link_given, link_gbps, link_efficiency, nvme_gbps, tier_after,
                               dram_price_ratio, stall_ms)
    document["assumptions"] = to_jsonable(assumptions)
    rendered = _render(plan)
    emit(as_json, document, Rendered(rendered.title, rendered.tables, rendered.why, assumptions))


def _assumptions(spec, mfu, tp, link, link_given, link_gbps, efficiency, nvme_gbps, tier_after, price, stall_ms):
    """The retention inputs that were defaulted or derived, beside those given."""
    rate = (f"{mfu:g} x {spec.name} peak x TP {tp}" if spec is not None else "--prefill-tflops")
    return (
        option("prefill rate", rate, "--mfu" if spec is not None and mfu != 0.45 else "--prefill-tflops",
               given=spec is None or mfu != 0.45, default_source="MFU 0.45, seed 003 napkin 0.6"),
        option("host link", f"{link_gbps:g} GB/s measured" if link_gbps is not None else link,
               "--link-gbps" if link_gbps is not None else "--link",
               given=link_gbps is not None or link_given,
               default_source="the GPU's slot, else pcie-gen5"),
        option("link efficiency", f"{efficiency:g}", "--link-efficiency", given=efficiency != 1.0,
               default_source="rated bandwidth"),
        option("NVMe tier", f"{nvme_gbps:g} GB/s, waits >= {tier_after:g} s", "--nvme-gbps/--tier-after",
               given=tier_after != 120.0 or nvme_gbps != NVME_DRIVE_BYTES_PER_S / 1e9,
               default_source="one NVMe drive, 120 s"),
        option("DRAM price, stall", f"mu ratio {price:g}, {stall_ms:g} ms tolerated",
               "--dram-price-ratio/--stall-ms", given=bool(price or stall_ms), default_source="0, 0"),
    )


def _render(plan: RetentionPlan) -> Rendered:
    tiers = table(
        f"reload vs recompute ({secs(plan.recompute_seconds)})",
        ["tier", "bandwidth", "reload", "round trip", "break-even T*", "vs recompute"],
        ([t.name, f"{t.bandwidth_bytes_per_s / 1e9:,.0f} GB/s", ms(t.reload_seconds),
          ms(t.round_trip_seconds), ms(t.break_even_seconds), f"{t.speedup_vs_recompute:,.1f}x"]
         for t in plan.tiers),
    )
    tables = [tiers]
    if plan.decisions:
        tables.append(table(
            "decision per tool class",
            ["tool", "typical wait", "min wait", "decision", "where", "resume stall", "hold if retained"],
            ([d.tool, f"{d.typical_wait_seconds:g} s",
              "—" if d.decisive_wait_seconds == d.typical_wait_seconds else f"{d.decisive_wait_seconds:g} s",
              d.decision.value, d.tier or "—",
              secs(d.resume_seconds), f"{d.hold_cost_byte_seconds / 1e9:,.1f} GB·s"]
             for d in plan.decisions),
        ))
    primary = plan.tiers[0]
    why = [
        f"reload over {primary.name} takes {ms(primary.reload_seconds)}, recompute "
        f"{secs(plan.recompute_seconds)}: {primary.speedup_vs_recompute:,.1f}x, the same at every context length",
        f"offload pays off for waits beyond {ms(primary.break_even_seconds)} (the round trip"
        + (" scaled by mu_HBM/(mu_HBM - mu_DRAM)" if plan.dram_price_ratio else "")
        + (f", plus {ms(plan.stall_seconds)} tolerated stall" if plan.stall_seconds else "") + ")",
    ]
    why.extend(f"{d.tool}: {d.decision.value} — {d.reason}" for d in plan.decisions)
    return Rendered(f"retention for {plan.context_tokens:,} tokens ({fmt_bytes(plan.kv_bytes, decimal=True)})",
                    tables, why)

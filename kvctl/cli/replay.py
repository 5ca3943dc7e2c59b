"""Replay a Mooncake trace or a scenario through SGLang's real radix cache; sweep policies.

The command parses options into `ReplaySettings`, validates everything (trace lines,
policies, pool size) before an engine exists, runs the replay (a Rich progress bar on a
TTY, never under --json), then prints the report (Rich tables, or --json) and, with
--out DIR, writes report.json, timeline.csv and PNG plots as one set (a temporary folder
renamed into place; --out is checked before the replay starts). With --sweep it runs
the grid, each run in its own process with --parallel N (or one Ray task per run with
--executor ray, kvctl.replay.ray_executor), and prints one ranked table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from engine_adapter.embedded.config import (
    EVICTION_POLICIES,
    HICACHE_WRITE_POLICIES,
    RETENTION_POLICIES,
)
from kvctl.cli.device_option import DeviceOption, resolve_device_option
from kvctl.cli.replay_common import ProgressBar, fmt_seconds
from kvctl.cli.sched_options import ChunkedPrefillOption, MaxPrefillOption, SchedulePolicyOption
from kvctl.errors import InputError
from kvctl.replay.engine_setup import DEFAULT_GPU, DEFAULT_MODEL, Deployment

if TYPE_CHECKING:
    from kvctl.replay.runner import ReplaySettings

Opt = typer.Option
# The runner's RETENTION_CHOICES (the engine's policies and `auto`), spelled here so that
# `kvctl replay --help` does not import the runner (numpy, the engine); a unit test keeps
# the two equal (tests/unit/test_replay_cli_imports.py).
RETENTION_HELP_CHOICES = (*RETENTION_POLICIES, "auto")


def replay_command(
    workload: Annotated[Path, typer.Argument(
        metavar="TRACE_OR_SCENARIO", help="Mooncake JSONL trace (.jsonl) or scenario (.yaml).")],
    pool_tokens: Annotated[Optional[int], Opt(help=(
        "KV pool in tokens; 0 = unbounded (the workload's total demand)."))] = None,
    pool_gb: Annotated[Optional[float], Opt(help=(
        "KV pool in GB (10^9 bytes) of --model's KV."))] = None,
    model: Annotated[str, Opt(help=(
        "Modeled model (preset or config.json): bytes per token, cost model, and the pool "
        "when no --pool-* is given."))] = DEFAULT_MODEL,
    gpu: Annotated[str, Opt(help="Modeled GPU preset.")] = DEFAULT_GPU,
    tp: Annotated[int, Opt(help="Tensor-parallel degree of the modeled deployment.")] = 1,
    cost_model: Annotated[Optional[Path], Opt(help=(
        "A step-cost model from `kvctl calibrate`: the replay's clock instead of the roofline "
        "(latencies are then labelled fitted)."))] = None,
    page_size: Annotated[Optional[int], Opt(help="Tokens per page (default 16).")] = None,
    eviction: Annotated[Optional[str], Opt(help=(
        f"SGLang eviction policy: {', '.join(EVICTION_POLICIES)} (default lru)."))] = None,
    tree_core: Annotated[str, Opt(help="SGLang radix tree core: rust or python.")] = "rust",
    retention: Annotated[Optional[str], Opt(help=(
        f"{' | '.join(RETENTION_HELP_CHOICES)}: K/V of a session waiting on a tool; auto = per tool "
        "by seed 003's break-even. No effect on Mooncake traces (no sessions)."))] = None,
    tau_high: Annotated[Optional[float], Opt(help=(
        "kvctl's admission ceiling on U_KV (seed 003), which SGLang lacks (default: off)."))
    ] = None,
    token_budget: ChunkedPrefillOption = None,
    max_prefill_tokens: MaxPrefillOption = None,
    schedule_policy: SchedulePolicyOption = None,
    max_running: Annotated[Optional[int], Opt(help="Max running requests.")] = None,
    decode_quantum: Annotated[Optional[int], Opt(help=(
        "Retired: only 1 (SGLang's per-token decode, which decode jumps made as fast as the "
        "old Q=16) is accepted."))] = None,
    exact_batches: Annotated[bool, Opt(help=(
        "Allocate through SGLang's ScheduleBatch each step instead of the direct cache path "
        "(the same tree and allocator calls, slower; a fidelity oracle)."))] = False,
    limit: Annotated[Optional[int], Opt(help=(
        "Replay only the first N requests of a trace, or the first N sessions of a scenario "
        "(each session issues several requests)."))] = None,
    seed: Annotated[Optional[int], Opt(help=(
        "Seed (default: a scenario's own, else 0); same seed, same report."))] = None,
    sweep: Annotated[Optional[list[str]], Opt(help=(
        "KEY=V1,V2 grid axis, repeatable; keys: eviction, pool-tokens, pool-gb, page-size, "
        "retention, tau-high, tree-core, chunked-prefill-size (token-budget), "
        "max-prefill-tokens, schedule-policy, max-running, decode-quantum, hicache-ratio "
        "(off for none), hicache-write-policy."))] = None,
    parallel: Annotated[int, Opt(help=(
        "Sweep runs in parallel processes (with --executor ray and no --ray-address: the "
        "local Ray instance's CPUs)."))] = 1,
    executor: Annotated[str, Opt(help=(
        "Where sweep runs go: local (processes here) or ray (one Ray task per grid point)."))
    ] = "local",
    ray_address: Annotated[Optional[str], Opt(help=(
        "With --executor ray: the cluster (auto, HOST:PORT, ray://HOST:PORT); default: start "
        "a local Ray instance."))] = None,
    out: Annotated[Optional[Path], Opt(help=(
        "Write report.json, timeline.csv and PNG plots here."))] = None,
    json_output: Annotated[bool, Opt("--json", help="Print the report as JSON.")] = False,
    device: DeviceOption = None,
    against: Annotated[Optional[str], Opt(help=(
        "Drive this live SGLang server (http://HOST:PORT) with the trace, replay it with the "
        "server's settings, print predicted against measured (docs/twin.md)."))] = None,
    speedup: Annotated[float, Opt(help="With --against: arrivals divided by X.")] = 1.0,
    vocab_size: Annotated[Optional[int], Opt(help=(
        "With --against: the model's vocabulary, when its config.json is not readable "
        "here."))] = None,
    curve: Annotated[bool, Opt("--curve", help=(
        "Hit rate at every pool size from one unbounded replay and one stack-distance pass "
        "in its event order (LRU assumed; Mooncake traces); with --out, curve.png."))] = False,
    curve_order: Annotated[str, Opt(help=(
        "With --curve: replay (the event order of one unbounded replay) or arrival (each "
        "request alone in arrival order: seconds, no replay, no concurrency)."))] = "replay",
    verify_points: Annotated[int, Opt(help=(
        "With --curve: replay N pool sizes exactly and print them beside the curve."))] = 0,
    hicache_ratio: Annotated[Optional[float], Opt(help=(
        "Replay through SGLang's HiCache (--enable-hierarchical-cache): host pool = R x the "
        "device pool (docs/hicache.md)."))] = None,
    hicache_size: Annotated[Optional[int], Opt(help=(
        "SGLang's HiCache host pool in GB of the modeled KV per rank (overrides the ratio, "
        "as in SGLang)."))] = None,
    hicache_write_policy: Annotated[Optional[str], Opt(help=(
        f"SGLang's HiCache write policy: {', '.join(HICACHE_WRITE_POLICIES)} "
        "(default write_through)."))] = None,
    plugin_url: Annotated[Optional[str], Opt(help=(
        "With --against: the server's kvctl plugin (http://HOST:PORT) when /server_info does "
        "not advertise it; its timed steps fit the prediction's clock."))] = None,
    replicas: Annotated[Optional[int], Opt(help=(
        "Replay a fleet: N replicas, each this replay, behind --router (docs/fleet.md)."))
    ] = None,
    router: Annotated[Optional[str], Opt(help=(
        "Fleet router policy: round_robin, random, power_of_two, cache_aware (SGLang's "
        "router), affinity (seed 003), oracle (default cache_aware)."))] = None,
    cache_threshold: Annotated[Optional[float], Opt(help=(
        "cache_aware: prefix match rate above which it routes by match."))] = None,
    balance_abs_threshold: Annotated[Optional[int], Opt(help=(
        "cache_aware: load gap (max - min) above which it may balance."))] = None,
    balance_rel_threshold: Annotated[Optional[float], Opt(help=(
        "cache_aware: load ratio (max / min) above which it may balance."))] = None,
    request_form: Annotated[Optional[str], Opt(help=(
        "cache_aware: the form requests reach the router in: text (kvctl's one-character-"
        "per-token text, the default) or input_ids (the router routes on their decimal "
        "text)."))] = None,
    mu: Annotated[Optional[float], Opt(help="affinity: weight of the match term (0..1).")] = None,
    gamma: Annotated[Optional[float], Opt(help="affinity: exponent of the load term.")] = None,
    workers: Annotated[Optional[list[str]], Opt(help=(
        "With --against a router: its workers (http://HOST:PORT, repeatable) when the "
        "router's GET /workers should not be used."))] = None,
    save_cost_model: Annotated[Optional[Path], Opt(help=(
        "With --against: write the step-cost model fitted on all of this drive's steps, "
        "for --cost-model on another drive (an out-of-sample clock)."))] = None,
    fit_share: Annotated[Optional[float], Opt(help=(
        "With --against: fit the clock on the steps of the first F of the requests sent "
        "and judge TTFT on the rest, held out (0 < F < 1, default 0.5; not with "
        "--cost-model)."))] = None,
    regret: Annotated[bool, Opt("--regret", help=(
        "Fleet: also replay the oracle router and report the hit tokens this router "
        "missed."))] = False,
) -> None:
    """Build settings, validate, run, render. InputError (exit 2) before running on bad input."""
    from kvctl.replay.runner import ReplaySettings

    fleet_options = {"cache_threshold": cache_threshold,
                     "balance_abs_threshold": balance_abs_threshold,
                     "balance_rel_threshold": balance_rel_threshold, "mu": mu, "gamma": gamma,
                     "request_text": request_form}
    fleet_sweep = any(o.partition("=")[0].strip() in ("replicas", "router")
                      for o in (sweep or ()))
    if replicas is None and router is None and not fleet_sweep and (
            regret or any(v is not None for v in fleet_options.values())):
        raise InputError("--regret and router options go with --replicas N --router POLICY")
    if against is None and (speedup != 1.0 or vocab_size is not None or plugin_url
                            or fit_share is not None):
        raise InputError("--speedup, --vocab-size, --plugin-url and --fit-share go with "
                         "--against URL")
    if against is not None and (hicache_ratio, hicache_size, hicache_write_policy) != (None,) * 3:
        raise InputError("--hicache-ratio/--hicache-size/--hicache-write-policy replay a trace "
                         "through SGLang's HiCache; --against does not take them")
    if against is not None and (router is not None or workers or replicas is not None
                                or _is_router(against)):
        from kvctl.cli.twin import fleet_against_command  # the fleet twin

        if replicas is not None:
            raise InputError("--against a router replays its own workers: drop --replicas")
        return fleet_against_command(
            str(workload), against, router=router or "cache_aware", options=fleet_options,
            workers=workers, speedup=speedup, limit=limit, vocab_size=vocab_size,
            seed=seed, deployment=Deployment(model=model, gpu=gpu, tp=tp),
            json_output=json_output, cost_model=cost_model, save_cost_model=save_cost_model,
            fit_share=fit_share, given={
                "pool_tokens": pool_tokens is not None, "pool_gb": pool_gb is not None,
                "page_size": page_size is not None, "eviction": eviction is not None,
                "max_running": max_running is not None, "token_budget": token_budget is not None,
                "tau_high": tau_high is not None, "sweep": bool(sweep), "out": out is not None,
                "plugin_url": plugin_url is not None, "regret": regret})
    if save_cost_model is not None and against is None:
        raise InputError("--save-cost-model goes with --against URL")
    if workers:
        raise InputError("--workers goes with --against ROUTER_URL")
    if against is not None:  # the twin: kvctl/twin, kvctl/cli/twin.py
        from kvctl.cli.twin import against_command

        return against_command(
            str(workload), against, speedup=speedup, limit=limit, vocab_size=vocab_size,
            seed=seed, deployment=Deployment(model=model, gpu=gpu, tp=tp),
            json_output=json_output, cost_model=cost_model, plugin_url=plugin_url,
            fit_share=fit_share, save_cost_model=save_cost_model, given={
                "pool_tokens": pool_tokens is not None, "pool_gb": pool_gb is not None,
                "page_size": page_size is not None, "eviction": eviction is not None,
                "max_running": max_running is not None, "token_budget": token_budget is not None,
                "tau_high": tau_high is not None, "sweep": bool(sweep), "out": out is not None})

    base = ReplaySettings(
        workload=str(workload), deployment=Deployment(model=model, gpu=gpu, tp=tp),
        pool_tokens=pool_tokens, pool_gb=pool_gb, page_size=page_size, eviction_policy=eviction,
        tree_core=tree_core, retention=retention, tau_high=tau_high, token_budget=token_budget,
        max_prefill_tokens=max_prefill_tokens, schedule_policy=schedule_policy,
        max_running_requests=max_running, decode_quantum=decode_quantum, limit=limit, seed=seed,
        exact_batches=exact_batches,
        device=resolve_device_option(device),
        cost_model=str(cost_model) if cost_model is not None else None,
        hicache_ratio=hicache_ratio, hicache_size=hicache_size,
        hicache_write_policy=hicache_write_policy,
    )
    if replicas is not None or router is not None or fleet_sweep:
        if against is not None or curve:
            raise InputError("--replicas/--router replay a fleet; --against and --curve take "
                             "one server")
        if executor != "local":
            raise InputError("a fleet sweep runs locally (--parallel N); --executor ray "
                             "takes single-server sweeps")
        from kvctl.cli.replay_fleet import run_fleet_command

        return run_fleet_command(base, replicas=replicas, router=router,
                                 options=fleet_options, regret=regret, sweep=sweep,
                                 parallel=parallel, out=out, json_output=json_output)
    if executor not in ("local", "ray"):
        raise InputError(f"--executor {executor!r}: expected local or ray")
    if executor == "ray" and not sweep:
        raise InputError("--executor ray runs sweeps: give --sweep KEY=V1,V2")
    if ray_address is not None and executor != "ray":
        raise InputError("--ray-address needs --executor ray")
    if verify_points and not curve:
        raise InputError("--verify-points needs --curve")
    if curve_order not in ("replay", "arrival"):
        raise InputError(f"--curve-order {curve_order!r}: expected replay or arrival")
    if curve:
        if sweep:
            raise InputError("--curve answers every pool size at once: drop --sweep")
        from kvctl.cli.replay_curve import run_curve

        run_curve(base, out, json_output, verify_points, parallel,
                  scheduled=curve_order == "replay")
    elif sweep:
        _sweep(base, sweep, parallel, out, json_output, executor=executor,
               ray_address=ray_address)
    else:
        _single(base, out, json_output)


def _is_router(url: str) -> bool:
    from kvctl.twin.fleet_twin import is_router

    return is_router(url)


def _single(settings: ReplaySettings, out: Path | None, json_output: bool) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.replay.plots import write_outputs
    from kvctl.replay.runner import prepare, run
    from kvctl.util.atomic import atomic_dir

    prepared = prepare(settings)
    with ProgressBar(not json_output, "replay") as bar:
        result = run(prepared, on_progress=bar.replay if bar.enabled else None)
    document = versioned(result.report.to_dict())  # report.json is the --json document
    if out is not None:
        with atomic_dir(out) as folder:  # the whole set, or nothing (old folder kept)
            write_outputs(folder, document, result.timeline, prepared.driver.name)
    if json_output:
        print_json(document)
    else:
        console().print(render_report(document))
        if out is not None:
            console().print(f"[dim]wrote {out}/report.json, timeline.csv, utilization.png, "
                            "hit_rate.png[/]")


def _sweep(base: ReplaySettings, options: list[str], parallel: int, out: Path | None,
           json_output: bool, executor: str = "local", ray_address: str | None = None) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.replay import sweep as sweeps
    from kvctl.replay.plots import plot_hit_rate_vs_pool, write_outputs
    from kvctl.util.atomic import atomic_dir, write_json

    axes = sweeps.parse_sweeps(options)
    runs = sweeps.grid(base, axes)
    pools = sweeps.validate(runs)
    done: list[int] = []
    with ProgressBar(not json_output, "sweep runs", total=len(runs)) as bar:

        def on_done(index: int, _result) -> None:
            done.append(index)
            bar.runs_done(len(done))

        if executor == "ray":
            from kvctl.replay.ray_executor import run_sweep_ray

            results = run_sweep_ray(runs, pools, address=ray_address, local_cpus=parallel,
                                    on_update=bar.runs_state)
        else:
            results = sweeps.run_sweep(runs, parallel=parallel, on_done=on_done)
    rows = sweeps.rank(runs, results)
    document = versioned(sweeps.sweep_document(axes, rows, results, runs))
    if out is not None:
        title = Path(base.workload).name
        with atomic_dir(out) as folder:  # the whole set, or nothing (old folder kept)
            for settings, outcome in zip(runs, results):
                if outcome.result is not None:
                    write_outputs(folder / sweeps.slug(settings.label),
                                  versioned(outcome.result.report.to_dict()),
                                  outcome.result.timeline, f"{title} ({settings.label})")
            points = sweeps.hit_vs_pool_points(rows)
            if points:
                plot_hit_rate_vs_pool(points, folder / "hit_rate_vs_pool.png", title)
            write_json(folder / "sweep.json", document)
    if json_output:
        print_json(document)
    else:
        clock = (f"fitted ({Path(base.cost_model).name})" if base.cost_model
                 else "modeled (roofline virtual clock)")
        console().print(_sweep_table(rows, Path(base.workload).name, clock))
        if out is not None:
            console().print(f"[dim]wrote {out}/sweep.json and one folder per run[/]")


# ----- rendering (people) ---------------------------------------------------------------


def render_report(doc: dict):
    """One replay's report as Rich renderables: header, figures, funnel, latency, integrity."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.glossary_terms import FOOTER
    from kvctl.cli.sched_options import rejected_lines, sched_header

    s, d, w = doc["settings"], doc["deployment"], doc["workload"]
    clock = s.get("clock", "modeled")  # "modeled" (roofline) or "fitted (FILE)"
    word = clock.split(" ", 1)[0]
    header = Text.assemble(
        ("kvctl replay ", "bold"), (w["name"], "bold cyan"),
        f"  ({w['kind']}, {doc['requests']:,} requests)\n",
        f"deployment {d['model_name']} on {d['gpu']} x TP{d['tp']} "
        f"({clock if word == 'modeled' else 'clock ' + clock})   "
        f"pool {s['pool_tokens']:,} tokens [{s['pool_source']}]\n",
        f"page {s['page_size']}  eviction {s['eviction_policy']}  tree core {s['tree_core']}  "
        f"retention {s['retention']}  tau_high {s['tau_high']}  budget {s['token_budget']:,}  "
        f"seed {s['seed']}\n",
        sched_header(s),
    )
    figures = Table(show_header=False, box=None, pad_edge=False)
    figures.add_column(style="bold", no_wrap=True)
    figures.add_column(justify="right", no_wrap=True)
    figures.add_column(style="dim")
    lat = doc["modeled_latency"]
    for name, value, note in (
        ("token hit rate H_prefix", f"{doc['hit_rate']:.2%}", "seed 003 eq. (2)"),
        ("prompt tokens", f"{doc['prompt_tokens']:,}", ""),
        ("hit / recomputed tokens", f"{doc['hit_tokens']:,} / {doc['recomputed_tokens']:,}", ""),
        ("evictions (tokens)", f"{doc['evictions']:,} ({doc['evicted_tokens']:,})", ""),
        ("retractions (tokens)", f"{doc['retractions']:,} ({doc['retracted_tokens']:,})",
         "preempted, recomputed"),
        ("offloaded / reloaded",
         f"{_bytes(doc['offloaded_bytes'])} / {_bytes(doc['reloaded_bytes'])}",
         "kvctl's host-tier model"),
        ("mapping-lag stalls", f"{doc['mapping_lag_stalls']:,}",
         f"{doc['mapping_lag_stall_seconds']:.3f} s"),
        ("admission deferrals", f"{doc['admission_deferrals']:,}", "tau_high ceiling"),
        ("rejected requests", f"{doc['rejected']['requests']:,}", "refused as SGLang refuses"),
        ("U_KV peak / mean", f"{doc['peak_kv_utilization']:.1%} / {doc['mean_kv_utilization']:.1%}",
         "seed 003 eq. (8)"),
        ("token_usage peak / mean",
         f"{doc['peak_token_usage']:.1%} / {doc['mean_token_usage']:.1%}",
         "SGLang's; evictable = free"),
        (f"{word} TTFT p50 / p99", _p50_p99(lat["ttft_s"]), clock),
        (f"{word} ITL p50 / p99", _p50_p99(lat["itl_s"]), clock),
        (f"{word} queueing p50 / p99", _p50_p99(lat["queue_s"]), clock),
        ("virtual time / steps", f"{doc['virtual_time_s']:,.1f} s / {doc['steps']:,}", ""),
    ):
        figures.add_row(name, value, note)
    funnel = FitTable(title="prefix-hit funnel (seed 000 0x0CF)",
                   title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("stage / rejection bucket", "requests", "tokens"):
        justify = "left" if column == "stage / rejection bucket" else "right"
        funnel.add_column(column, justify=justify, no_wrap=True)
    stages, rejections = doc["funnel"]["stages"], doc["funnel"]["rejections"]
    for index, stage in enumerate(stages):
        funnel.add_row(stage["name"], _count(stage["requests"]), _count(stage["tokens"]))
        if index < len(rejections):
            lost = rejections[index]
            style = "red" if lost["requests"] or lost["tokens"] else "dim"
            funnel.add_row(f"  lost: {lost['reason']}", _count(lost["requests"]),
                           _count(lost["tokens"]), style=style)
    integ = doc["integrity"]
    status = Text.assemble(
        ("integrity ", "bold"), ("OK" if doc["integrity_ok"] else "FAILED",
                                 "green" if doc["integrity_ok"] else "bold red"),
        f"  pool residual {integ['pool_residual_tokens']} tokens, delta_ref max "
        f"{integ['delta_ref_max']}, protected delta {integ['delta_protected_tokens']}",
    )
    if "hicache" in doc:  # SGLang's HiCache ran (kvctl/cli/replay_hicache.py)
        from kvctl.cli.replay_hicache import hicache_rows

        for row in hicache_rows(doc):
            figures.add_row(*row)
    parts = [header, figures, rejected_lines(doc), funnel, status]
    parts += [Text(f"  {problem}", style="red") for problem in integ["problems"]]
    parts += [Text(f"alert at end: {a['name']} ({a['severity']}): {a['evidence']}", style="yellow")
              for a in doc.get("alerts_at_end", ())]
    parts.append(Text("\n".join(f"- {note}" for note in doc["notes"]), style="dim"))
    parts.append(Text(FOOTER, style="dim"))
    return Group(*parts)


def _sweep_table(rows, title: str, clock: str = "modeled (roofline virtual clock)"):
    from rich import box

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.glossary_terms import FOOTER

    axes = " / ".join(rows[0].params) if rows else ""
    table = FitTable(title=f"sweep over {title} ({axes}), ranked by hit rate", title_justify="left",
                     caption=(f"TTFT p99 is {clock}; evicted tokens in "
                              f"--json\n{FOOTER}"),
                     caption_justify="left", box=box.SIMPLE_HEAD, key_columns=2)
    pool_swept = any(key in ("pool-tokens", "pool-gb") for key in (rows[0].params if rows else {}))
    columns = ["#", "run", "hit rate", "evictions", "retractions", "TTFT p99", "U_KV peak"]
    if not pool_swept:
        columns.insert(2, "pool")
    for column in columns:
        table.add_column(column, justify="left" if column == "run" else "right", no_wrap=True)
    marked = any(row.attempts > 1 or row.failure for row in rows)
    if marked:
        columns.append("note")
    for row in rows:
        cells = [str(row.rank), " / ".join(row.params.values()) or row.label,
                 _pct(row.hit_rate, 2), _int(row.evictions), _int(row.retractions),
                 fmt_seconds(row.ttft_p99_s), _pct(row.peak_kv_utilization, 1)]
        if not pool_swept:
            cells.insert(2, f"{row.pool_tokens:,}")
        if marked:
            cells.append(_run_note(row))
        table.add_row(*cells, style="red" if row.failure else None)
    return table


def _run_note(row) -> str:
    """'failed: <why>' or 'retried after: <why>' (a Ray sweep's lost runs), else ''."""
    if row.failure:
        return f"failed after {row.attempts} attempt(s): {row.failure}"
    return f"retried after: {row.retried_after}" if row.attempts > 1 else ""


def _pct(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


def _int(value) -> str:
    return "-" if value is None else f"{value:,}"


def _p50_p99(stats: dict) -> str:
    return f"{fmt_seconds(stats['p50'])} / {fmt_seconds(stats['p99'])}"


def _count(value) -> str:
    return "not observable" if value is None else f"{value:,}"


def _bytes(value: int) -> str:
    from kvctl.util.units import fmt_bytes

    return fmt_bytes(value)

"""`kvctl replay TRACE --curve`: the hit rate at every pool size from one unbounded replay
(its schedule) and one stack-distance pass in that replay's event order, a table and
curve.png, and with --verify-points N exact replays side by side.

Orchestration and rendering only: the stream, the pass and the document live in
kvctl.replay.curve. Bad input fails before any work (InputError, exit 2); --out is
written as one set (report.json + curve.png) or not at all.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from kvctl.errors import InputError


def run_curve(base, out: Path | None, json_output: bool, verify_points: int,
              parallel: int, scheduled: bool = True) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.cli.replay_common import ProgressBar
    from kvctl.replay import sweep as sweeps
    from kvctl.replay.curve.document import VerifiedPoint, curve_document, table_rows, verify_sizes
    from kvctl.replay.curve.profile import build_curve
    from kvctl.replay.curve.stream import mooncake_stream
    from kvctl.replay.runner import prepare
    from kvctl.util.atomic import atomic_dir, write_json

    prepared = prepare(base)  # validates the trace, the pool and the policy
    if prepared.workload["kind"] != "mooncake":
        raise InputError(f"{base.workload}: --curve reads Mooncake traces (.jsonl); "
                         "for a scenario, sweep --pool-tokens instead")
    resolved = prepared.resolved
    pool, page = resolved["pool_tokens"], resolved["page_size"]
    started = time.monotonic()
    stream = mooncake_stream(base.workload, page_size=page, limit=base.limit)
    schedule = _schedule(base, stream, json_output) if scheduled else None
    with ProgressBar(not json_output, "curve: one stack-distance pass") as bar:
        curve = build_curve(stream, schedule)
        if bar.bar is not None:
            bar.bar.update(bar.task, total=1, completed=1)
    rows = table_rows(curve, pool, resolved["pool_source"])
    below_peak = _below_peak(stream, schedule, curve, prepared.config)
    rows = [replace(row, hit_rate=below_peak(row.pool_tokens))
            if row.pool_tokens is not None and row.pool_tokens < curve.anchor_tokens
            and schedule is not None else row for row in rows]
    seconds = time.monotonic() - started
    summary = prepared.driver.summary
    sizes = verify_sizes(rows, verify_points, smallest=-(-summary.max_request_tokens // page) * page)
    verified: list[VerifiedPoint] = []
    if sizes:
        runs = [replace(base, pool_tokens=size, pool_gb=None, label=f"pool {size:,}")
                for size in sizes]
        with ProgressBar(not json_output, "exact replays", total=len(runs)) as bar:
            done: list[int] = []
            outcomes = sweeps.run_sweep(runs, parallel=parallel,
                                        on_done=lambda i, _o: (done.append(i),
                                                               bar.runs_done(len(done))))
        for size, outcome in zip(sizes, outcomes):
            exact = outcome.result.report.to_dict()["hit_rate"]
            estimate = (below_peak(size) if schedule is not None and size < curve.anchor_tokens
                        else curve.hit_rate(size))
            verified.append(VerifiedPoint(pool_tokens=size, curve_hit_rate=estimate,
                                          exact_hit_rate=exact))
    document = versioned(curve_document(
        curve, workload=prepared.workload, rows=rows, verified=verified, pool_tokens=pool,
        eviction_policy=resolved["eviction_policy"], seconds=seconds))
    if out is not None:
        from kvctl.replay.curve.plot import plot_curve

        with atomic_dir(out) as folder:
            write_json(folder / "report.json", document)
            plot_curve(document, folder / "curve.png", prepared.driver.name)
    if json_output:
        print_json(document)
        return
    console().print(render_curve(document))
    if out is not None:
        console().print(f"[dim]wrote {out}/report.json, curve.png[/]")


def _below_peak(stream, schedule, curve, config):
    """H at a pool below the schedule's running peak, from a schedule synthesized at that
    pool (kvctl/replay/curve/synth.py), each pool computed once."""
    from kvctl.replay.curve.synth import synthesized_hit_rate

    known: dict[int, float] = {}

    def rate(pool_tokens: int) -> float:
        if pool_tokens not in known:
            known[pool_tokens] = synthesized_hit_rate(stream, schedule, config, pool_tokens)
        return known[pool_tokens]

    return rate


def _schedule(base, stream, json_output: bool):
    """One replay with `base`'s settings at an unbounded pool, recorded: its event order
    holds at every pool that fits its running requests (kvctl/replay/curve/scheduled.py)."""
    from kvctl.cli.replay_common import ProgressBar
    from kvctl.replay.curve.schedule import ScheduleRecorder
    from kvctl.replay.runner import prepare, run

    unbounded = prepare(replace(base, pool_tokens=0, pool_gb=None, label="curve schedule"))
    recorder = ScheduleRecorder(stream.rids, stream.arrival_s, unbounded.resolved["pool_tokens"])
    with ProgressBar(not json_output, "curve: one unbounded replay (its schedule)") as bar:
        run(unbounded, on_finished=recorder, on_engine=recorder.attach, on_progress=bar.replay)
    return recorder.schedule()


def render_curve(doc: dict):
    """The table people read: sizes, hit rates, and verified points side by side."""
    from rich import box
    from rich.console import Group
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable

    w = doc["workload"]
    header = Text.assemble(
        ("kvctl replay --curve ", "bold"), (w["name"], "bold cyan"),
        f"  ({w['requests']:,} requests, {doc['page_accesses']:,} page accesses at page "
        f"{doc['page_size']}, {doc['curve_seconds']:.1f} s)\n",
        f"ceiling {doc['ceiling_hit_rate']:.2%}   compulsory misses (first touches) "
        f"{doc['compulsory_miss_share']:.2%}   in flight (matched while their computer "
        f"ran) {doc['concurrent_miss_share']:.2%}   uncacheable (S-1 cap, partial page) "
        f"{doc['uncacheable_share']:.2%} of prompt tokens",
    )
    table = FitTable(title="token hit rate H_prefix by pool size (LRU assumed)",
                     title_justify="left", box=box.SIMPLE_HEAD, key_columns=1)
    for column in ("pool", "tokens", "hit rate"):
        table.add_column(column, justify="left" if column == "pool" else "right", no_wrap=True)
    valid = doc.get("schedule_valid_from_pool_tokens")
    for row in doc["table"]:
        size = "unbounded" if row["pool_tokens"] is None else f"{row['pool_tokens']:,}"
        below = valid is not None and row["pool_tokens"] is not None and row["pool_tokens"] < valid
        table.add_row(row["label"], size, f"{row['hit_rate']:.2%}" + (" *" if below else ""))
    parts = [header, table]
    if doc["verified"]:
        check = FitTable(title=(f"curve vs exact replay ({doc['eviction_policy_verified']}, "
                                "kvctl replay --pool-tokens N)"),
                         title_justify="left", box=box.SIMPLE_HEAD, key_columns=1)
        for column in ("tokens", "curve", "exact", "error"):
            check.add_column(column, justify="right", no_wrap=True)
        for v in doc["verified"]:
            check.add_row(f"{v['pool_tokens']:,}", f"{v['curve_hit_rate']:.2%}",
                          f"{v['exact_hit_rate']:.2%}", f"{v['error'] * 100:+.2f} pp")
        parts.append(check)
    if valid is not None and any(r["pool_tokens"] is not None and r["pool_tokens"] < valid
                                 for r in doc["table"]):
        parts.append(Text(f"* below {valid:,} tokens: the event order of a schedule "
                          "synthesized at that pool (a replay there queues differently; "
                          "the assumption line says how)", style="dim"))
    parts.append(Text(f"- {doc['assumption']}", style="dim"))
    return Group(*parts)

"""Fleet sweeps: `--sweep replicas=1,2,4,8 --sweep router=round_robin,cache_aware`, and any
single-server sweep key (kvctl/replay/sweep.py SWEEP_KEYS) beside them.

Every grid point is validated first (`prepare_fleet`: an unknown policy, a bad replica
count, an impossible pool fail before any run). Points run one after another, or in
`parallel` spawned processes (each imports SGLang and builds its own replicas). Rows are
ranked by fleet hit rate (higher first), then TTFT p99 (lower first). With `out`, a PNG
of fleet hit rate and TTFT p99 against replicas, one line per router.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path

from kvctl.errors import InputError
from kvctl.fleet.runner import MAX_REPLICAS, FleetSettings, prepare_fleet, run_fleet
from kvctl.fleet.routers.registry import check_policy
from kvctl.replay.sweep import SWEEP_KEYS, parse_sweeps

FLEET_KEYS = ("replicas", "router")


@dataclass(frozen=True, kw_only=True)
class FleetPoint:
    label: str
    params: dict
    replay: object  # ReplaySettings
    fleet: FleetSettings


def parse(options: list[str]) -> dict[str, list[str]]:
    """The single-server sweep keys (kvctl/replay/sweep.py) plus replicas and router."""
    return parse_sweeps(options, extra={k: (lambda item, k=k: _value(k, item))
                                        for k in FLEET_KEYS})


def _value(key: str, item: str):
    if key == "replicas":
        try:
            n = int(item)
        except ValueError:
            raise InputError(f"--sweep replicas: {item!r} is not an integer") from None
        if not 1 <= n <= MAX_REPLICAS:
            raise InputError(f"--sweep replicas: {n} is outside 1..{MAX_REPLICAS}")
        return n
    if key == "router":
        return check_policy(item)
    field, parser = SWEEP_KEYS[key]
    try:
        return parser(item)
    except ValueError:
        raise InputError(f"--sweep {key}: {item!r} is not a valid {parser.__name__}") from None


def grid(base, fleet: FleetSettings, axes: dict[str, list[str]]) -> list[FleetPoint]:
    keys = list(axes)
    points = []
    for values in itertools.product(*(axes[k] for k in keys)):
        replay_changes, fleet_changes = {}, {}
        for k, v in zip(keys, values):
            if k == "replicas":
                fleet_changes["replicas"] = _value(k, v)
            elif k == "router":
                fleet_changes["router"] = v
                if v != fleet.router:  # options belong to the policy they were given for
                    fleet_changes["router_options"] = {}
            else:
                replay_changes[SWEEP_KEYS[k][0]] = _value(k, v)
        label = " ".join(f"{k}={v}" for k, v in zip(keys, values))
        points.append(FleetPoint(label=label, params=dict(zip(keys, values)),
                                 replay=replace(base, label=label, **replay_changes),
                                 fleet=replace(fleet, **fleet_changes)))
    return points


def run_point(point: FleetPoint) -> dict:
    """One grid point's fleet document (a spawned worker's entry point)."""
    result = run_fleet(prepare_fleet(point.replay, point.fleet))
    return result.to_dict()


def run_points(points: list[FleetPoint], parallel: int, on_done=None) -> list[dict]:
    if parallel <= 1 or len(points) == 1:
        documents = []
        for i, point in enumerate(points):
            documents.append(run_point(point))
            if on_done is not None:
                on_done(i + 1)
        return documents
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    documents: list[dict | None] = [None] * len(points)
    with ProcessPoolExecutor(max_workers=parallel, mp_context=context) as pool:
        futures = {pool.submit(run_point, p): i for i, p in enumerate(points)}
        for done, future in enumerate(as_completed(futures), 1):
            documents[futures[future]] = future.result()
            if on_done is not None:
                on_done(done)
    return documents


def rows(points: list[FleetPoint], documents: list[dict]) -> list[dict]:
    table = []
    for point, doc in zip(points, documents):
        fleet = doc["fleet"]
        table.append({"label": point.label, "params": point.params,
                      "replicas": doc["replica_count"], "router": doc["router"]["name"],
                      "hit_rate": fleet["hit_rate"], "requests": fleet["requests"],
                      "ttft_p99_s": fleet["ttft_s"]["p99"], "e2e_p99_s": fleet["e2e_s"]["p99"],
                      "imbalance": doc["imbalance"]["prompt_tokens"],
                      "regret_tokens": doc["regret_tokens"]})
    order = sorted(range(len(table)), key=lambda i: (
        -(table[i]["hit_rate"] or 0.0), table[i]["ttft_p99_s"] or float("inf"), i))
    ranked = []
    for rank, i in enumerate(order, 1):
        ranked.append({"rank": rank, **table[i]})
    return ranked


def run_sweep(base, fleet: FleetSettings, options: list[str], *, parallel: int,
              out: Path | None, json_output: bool) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.util.atomic import atomic_dir

    axes = parse(options)
    points = grid(base, fleet, axes)
    for point in points:  # every point valid before any run
        prepare_fleet(point.replay, point.fleet)
    documents = run_points(points, parallel)
    ranked = rows(points, documents)
    document = versioned({"sweep": axes, "rows": ranked, "runs": documents})
    if out is not None:
        from kvctl.fleet.plots import write_sweep_plot
        import json

        with atomic_dir(out) as folder:
            (folder / "sweep.json").write_text(json.dumps(document, indent=2, default=str))
            write_sweep_plot(folder / "fleet_sweep.png", ranked)
    if json_output:
        print_json(document)
    else:
        console().print(render_sweep(ranked, axes))
        if out is not None:
            console().print(f"[dim]wrote {out}/sweep.json, fleet_sweep.png[/]")


def render_sweep(ranked: list[dict], axes: dict):
    from rich import box

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.glossary_terms import FOOTER
    from kvctl.cli.replay_common import fmt_seconds

    table = FitTable(title=f"fleet sweep over {' x '.join(axes)}, ranked by fleet hit rate",
                     title_justify="left", box=box.SIMPLE_HEAD, key_columns=2,
                     caption=f"TTFT on the virtual clock; imbalance = max / mean prompt "
                             f"tokens\n{FOOTER}", caption_justify="left")
    for column in ("#", "run", "hit rate", "TTFT p99", "e2e p99", "imbalance"):
        table.add_column(column, justify="left" if column == "run" else "right", no_wrap=True)
    for r in ranked:
        table.add_row(str(r["rank"]), " / ".join(r["params"].values()),
                      "-" if r["hit_rate"] is None else f"{r['hit_rate']:.2%}",
                      fmt_seconds(r["ttft_p99_s"]), fmt_seconds(r["e2e_p99_s"]),
                      "-" if r["imbalance"] is None else f"{r['imbalance']:.2f}")
    return table


"""`kvctl replay TRACE --replicas N --router POLICY`: the fleet replay's CLI side.

Validates (kvctl/fleet/runner.py `prepare_fleet`) before any engine exists, runs with a
progress bar on a TTY (never under --json), prints one table (fleet row, then one row per
replica) or the --json document; with --sweep replicas=... --sweep router=... it runs the
grid (kvctl/fleet/sweep.py) and prints one ranked table, with --out a plot.
"""

from __future__ import annotations

from pathlib import Path

from kvctl.cli.replay_common import ProgressBar
from kvctl.cli.replay_common import fmt_seconds as _sec
from kvctl.errors import InputError


def run_fleet_command(base, *, replicas: int | None, router: str | None, options: dict,
                      regret: bool, sweep: list[str] | None, parallel: int, out: Path | None,
                      json_output: bool) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.fleet.runner import FleetSettings, prepare_fleet, run_fleet

    swept = {o.partition("=")[0].strip() for o in (sweep or ())}
    if replicas is None and "replicas" not in swept:
        raise InputError("a fleet replay needs --replicas N (or --sweep replicas=...)")
    fleet = FleetSettings(replicas=replicas if replicas is not None else 1,
                          router=router or "cache_aware", router_options=options,
                          regret=regret)
    if sweep:
        from kvctl.fleet.sweep import run_sweep

        return run_sweep(base, fleet, sweep, parallel=parallel, out=out,
                         json_output=json_output)
    if out is not None:
        raise InputError("--out with a fleet replay writes the sweep's plot: give --sweep")
    prepared = prepare_fleet(base, fleet)
    total = prepared.replica.driver.total_hint()
    with ProgressBar(not json_output, f"fleet x{fleet.replicas}: routed", total=total) as bar:
        result = run_fleet(prepared, on_progress=lambda done, _total, _t: bar.runs_done(done))
    document = versioned(result.to_dict())
    if json_output:
        print_json(document)
    else:
        console().print(render_fleet(document))


def _pct(value) -> str:
    return "-" if value is None else f"{value:.2%}"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_fleet(doc: dict):
    """The fleet report: header, then the fleet's row and each replica's."""
    from rich import box
    from rich.console import Group
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.glossary_terms import FOOTER

    s, router = doc["replica"], doc["router"]
    options = "  ".join(f"{k} {v}" for k, v in router.items() if k != "name")
    header = Text.assemble(
        ("kvctl replay ", "bold"), (doc["workload"]["name"], "bold cyan"),
        f"  (fleet: {doc['replica_count']} replicas behind ", (router["name"], "bold"),
        f"{'  ' + options if options else ''})\n",
        f"each replica: pool {s['pool_tokens']:,} tokens  page {s['page_size']}  "
        f"eviction {s['eviction_policy']}  max running {s['max_running_requests']}  "
        f"clock {s['clock']}\n",
    )
    table = FitTable(box=box.SIMPLE_HEAD, key_columns=1,
                     caption=("TTFT and e2e on the virtual clock; imbalance = max / mean "
                              f"prompt tokens\n{FOOTER}"), caption_justify="left")
    for column in ("", "requests", "prompt tok", "hit rate", "TTFT p50 / p99",
                   "e2e p50 / p99"):
        table.add_column(column, justify="left" if not column else "right", no_wrap=True)

    def row(name: str, part: dict, style=None) -> None:
        table.add_row(name, f"{part['requests']:,}", f"{part['prompt_tokens']:,}",
                      _pct(part["hit_rate"]),
                      f"{_sec(part['ttft_s']['p50'])} / {_sec(part['ttft_s']['p99'])}",
                      f"{_sec(part['e2e_s']['p50'])} / {_sec(part['e2e_s']['p99'])}",
                      style=style)

    row("fleet", doc["fleet"], "bold")
    for j, part in enumerate(doc["replicas"]):
        row(f"replica {j}", part)
    fleet = doc["fleet"]
    lines = [f"imbalance (max / mean)  requests {_ratio(doc['imbalance']['requests'])}  "
             f"prompt tokens {_ratio(doc['imbalance']['prompt_tokens'])}"]
    if doc.get("regret_tokens") is not None:
        share = (doc["regret_tokens"] / fleet["prompt_tokens"]) if fleet["prompt_tokens"] else 0
        lines.append(f"routing regret  {doc['regret_tokens']:,} hit tokens the oracle got "
                     f"that {router['name']} did not ({share:.2%} of prompt tokens); hit "
                     f"tokens in all: oracle {doc['oracle_hit_tokens']:,}, {router['name']} "
                     f"{fleet['hit_tokens']:,} (the oracle is greedy: not an upper bound)")
    if fleet["rejected"]:
        lines.append(f"rejected  {fleet['rejected']:,} requests SGLang's door refuses "
                     "(longer than the pool or the context)")
    lines += [f"- {note}" for note in doc.get("notes", [])]
    return Group(header, table, Text("\n".join(lines)))

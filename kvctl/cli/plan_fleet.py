"""`kvctl plan recommend --trace T --slo ttft-p99=2s`: the fleet question's CLI side.

Parses and checks everything (SLOs, routers, --max-replicas, the trace and each router's
fleet at --max-replicas) before any replay; runs the search (kvctl/fleet/recommend.py),
each evaluation a real fleet replay, with a progress bar on a TTY (none under --json);
prints the runs, the recommendation and how it was validated, or the --json document.

Exit code: 0 whenever the search ran, including when no router meets the SLO within
--max-replicas (then `"recommendation": null` and the closest run is named): the command
answered the question. 2 on bad input (before any replay), as every kvctl command.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvctl.fleet.recommend import (
    DEFAULT_ROUTERS,
    FleetEvaluator,
    Search,
    check_max_replicas,
    fmt_value,
    parse_routers,
    parse_slos,
    search,
    search_document,
)


def fleet_recommend(base, *, slos: Sequence[str], routers: str | None, max_replicas: int,
                    json_output: bool) -> None:
    from kvctl.cli.output import console, print_json

    parsed = parse_slos(slos)
    names = parse_routers(routers) if routers is not None else DEFAULT_ROUTERS
    check_max_replicas(max_replicas)
    with _RunsBar(not json_output) as bar:
        evaluator = FleetEvaluator(base, on_start=bar.start, on_progress=bar.update)
        evaluator.check(names, max_replicas)
        result = search(names, max_replicas, parsed, evaluator)
    header = evaluator.headers[0] if evaluator.headers else None
    document = search_document(result, header=header, routers=names)
    if json_output:
        print_json(document)
    else:
        console().print(render(result, document))


class _RunsBar:
    """One Rich bar on stderr (TTY only): which run, and its requests routed so far."""

    def __init__(self, wanted: bool) -> None:
        from rich.console import Console

        self._console = Console(stderr=True)
        self.enabled = wanted and self._console.is_terminal
        self.bar = self.task = None
        self.count = 0

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
                TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                MofNCompleteColumn(), TimeElapsedColumn(),
                                console=self._console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("searching", total=None)
        return self

    def start(self, router: str, n: int) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.update(self.task, description=f"run {self.count}: {router} x{n}",
                            completed=0, total=None)

    def update(self, done: int, total: int | None, t: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, total=total, completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _replicas(n: int) -> str:
    return f"{n} replica{'s' if n != 1 else ''}"


def _missed_text(run, slos) -> str:
    return ", ".join(f"{s.key} {s.show(run.metrics.get(s.key))} "
                     f"{'<' if s.minimum else '>'} {s.show(s.target)}" for s in run.missed(slos))


def _shown(slos) -> list[str]:
    """The SLO keys, then hit-rate and ttft-p99 (the tie-breaks) when not among them."""
    keys = [s.key for s in slos]
    return keys + [k for k in ("hit-rate", "ttft-p99") if k not in keys]


def render(result: Search, document: dict):
    from rich import box
    from rich.console import Group
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable

    slos = result.slos
    workload = document.get("workload") or {}
    replica = document.get("replica") or {}
    head = Text.assemble(
        ("kvctl plan recommend ", "bold"), (str(workload.get("name", "")), "bold cyan"),
        f"  SLO {', '.join(s.describe() for s in slos)}  "
        f"(1..{result.max_replicas} replicas; routers {', '.join(document['routers'])})")
    table = FitTable(box=box.SIMPLE_HEAD, key_columns=2, title="runs made (in order)",
                     title_justify="left")
    shown = _shown(slos)
    for column in ("#", "router", "replicas", *shown, "SLO"):
        table.add_column(column, justify="left" if column == "router" else "right",
                         no_wrap=True)
    for run in result.runs:
        verdict = "met" if run.meets else "missed " + ",".join(s.key for s in run.missed(slos))
        table.add_row(str(run.order), run.router, str(run.replicas),
                      *(fmt_value(k, run.metrics.get(k)) for k in shown), verdict,
                      style=None if run.meets else "dim")
    lines = []
    rec = result.recommendation
    if rec is not None:
        got = ", ".join(f"{s.key} {s.show(rec.answer.metrics.get(s.key))}" for s in slos)
        lines.append(f"recommendation: {_replicas(rec.replicas)} behind {rec.router} ({got})")
        tied = [a for a in result.answers if a.replicas == rec.replicas and a is not rec]
        if tied:
            def brief(a) -> str:
                return (f"{a.router} hit rate {fmt_value('hit-rate', a.answer.metrics.get('hit-rate'))}"
                        f", ttft-p99 {fmt_value('ttft-p99', a.answer.metrics.get('ttft-p99'))}")
            lines.append(f"  tie on {_replicas(rec.replicas)}, broken by hit rate then "
                         f"ttft-p99: {'; '.join(brief(a) for a in (rec, *tied))}")
    else:
        lines.append(f"recommendation: none; no router met the SLO within "
                     f"{_replicas(result.max_replicas)}")
        c = result.closest
        lines.append(f"closest: {c.router} x{c.replicas} (missed {_missed_text(c, slos)})")
    for a in result.answers:
        if a.replicas is None:
            lines.append(f"  {a.router}: none within {result.max_replicas}")
        elif a.below is None:
            lines.append(f"  {a.router}: {_replicas(a.replicas)} (the fewest possible)")
        else:
            lines.append(f"  {a.router}: {_replicas(a.replicas)}; {_replicas(a.below.replicas)}"
                         f" misses: {_missed_text(a.below, slos)}")
    clock = replica.get("clock", "modeled")
    clock_text = ("modeled (roofline virtual clock)" if clock == "modeled"
                  else f"{clock} (kvctl calibrate's step costs)")
    served = [r.metrics.get("requests") for r in result.runs]
    rejected = max((r.metrics.get("rejected") or 0) for r in result.runs)
    lines.append(
        f"validated by the fleet replay: {len(result.runs)} runs, each a fleet of SGLang "
        f"radix caches on this CPU replaying {workload.get('name', 'the trace')} "
        f"(pool {replica.get('pool_tokens', 0):,} tokens per replica); clock {clock_text}")
    lines.append("search: doubling then bisection per router, assuming more replicas never "
                 "turn a met SLO into a miss; only the runs above were made")
    if rejected:
        lines.append(f"note: up to {rejected:,} requests rejected per run (longer than a "
                     f"replica's pool or context); latencies and hit rate cover the "
                     f"{min(served):,}+ served")
    return Group(head, table, Text("\n".join(lines)))

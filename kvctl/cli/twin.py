"""`kvctl replay TRACE --against URL`: the CLI edge of kvctl/twin (parse, progress, render).

The command function only checks that no replay setting was given (the twin takes the
server's), runs `run_twin` with a progress bar per phase on a TTY, and prints the side-by-
side table, or the document with --json.
"""

from __future__ import annotations

from kvctl.errors import InputError

# replay options that would contradict "the server's own settings"
_SERVER_SETTINGS = ("pool_tokens", "pool_gb", "page_size", "eviction", "max_running",
                    "token_budget", "tau_high", "sweep", "out")


def against_command(workload: str, url: str, *, speedup: float, limit: int | None,
                    vocab_size: int | None, seed: int | None, deployment, json_output: bool,
                    given: dict, cost_model=None, plugin_url: str | None = None,
                    fit_share: float | None = None, save_cost_model=None) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.cli.replay_common import ProgressBar
    from kvctl.replay.mooncake import scan_trace
    from kvctl.twin.twin_run import run_twin

    clashing = [name for name in _SERVER_SETTINGS if given.get(name)]
    if clashing:
        flags = ", ".join("--" + name.replace("_", "-") for name in clashing)
        raise InputError(f"--against replays with the server's own settings: drop {flags}")
    if save_cost_model is not None:  # before the drive and before reading the trace
        from kvctl.record.writer import check_destination

        check_destination(save_cost_model, what="--save-cost-model", example="clock.json")
    total = scan_trace(workload, limit=limit).requests
    bars = _Phases(ProgressBar(not json_output, "server answered", total=total),
                   ProgressBar(not json_output, "replay"))
    try:
        document = run_twin(workload, url, speedup=speedup, limit=limit, vocab_size=vocab_size,
                            seed=seed or 0, deployment=deployment, on_sent=bars.sent,
                            on_replay=bars.replay, plugin_url=plugin_url, fit_share=fit_share,
                            cost_model=str(cost_model) if cost_model is not None else None,
                            save_cost_model=(str(save_cost_model) if save_cost_model is not None
                                             else None))
    finally:
        bars.close()
    if json_output:
        print_json(versioned(document))
    else:
        console().print(render_twin(document))


class _Phases:
    """One progress bar at a time (a TTY only): the drive's, then the replay's."""

    def __init__(self, drive, replay) -> None:
        self._drive, self._replay = drive, replay
        self._active = None

    def _switch(self, bar) -> None:
        if self._active is not bar:
            self.close()
            self._active = bar.__enter__()

    def sent(self, count: int) -> None:
        self._switch(self._drive)
        self._drive.runs_done(count)

    def replay(self, progress) -> None:
        self._switch(self._replay)
        self._replay.replay(progress)

    def close(self) -> None:
        if self._active is not None:
            self._active.__exit__(None, None, None)
            self._active = None


def render_twin(doc: dict):
    """Predicted and measured side by side, then the notes. Hit figures are over all
    requests; the latency rows over the requests the clock is judged on (a held-out part
    of the drive, or all of it with another run's clock), which a row above them names."""
    from rich import box
    from rich.console import Group
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.replay_common import fmt_seconds as _sec

    m, p, a = doc["measured"], doc["predicted"], doc["agreement"]
    jm, jp = a["judged"]["measured"], a["judged"]["predicted"]
    table = FitTable(title=f"{doc['trace']} against {doc['server']} (arrivals / "
                           f"{doc['speedup']:g})", title_justify="left", box=box.SIMPLE_HEAD)
    clock = p.get("clock")  # the prediction's clock (kvctl/twin/clock.py), when known
    heading = Text(f"predicted latencies: {clock['label']}" if clock else "")
    for column in ("", "measured", "predicted", "difference"):
        table.add_column(column, justify="left" if not column else "right", no_wrap=True)
    rows = [
        ("requests served / rejected", f"{m['served']:,} / {m['rejected']:,}",
         f"{p['served']:,} / {p['rejected']:,}", "equal" if a["rejected_equal"] else "differ"),
        ("prompt tokens", _int(m["prompt_tokens"]), _int(p["prompt_tokens"]), ""),
        ("hit tokens", _int(m["hit_tokens"]), _int(p["hit_tokens"]), ""),
        ("token hit rate", _pct(m["hit_rate"]), _pct(p["hit_rate"]),
         _points(a["hit_rate_points"])),
        ("requests with equal hit tokens", "", "",
         _pct(a["hit_tokens_equal_share"]) + f" of {a['requests_compared']:,}"),
        ("evicted tokens", _int(m["evicted_tokens"]), _int(p["evicted_tokens"]), ""),
        (Text(_judged_heading(a), style="bold"), "", "", ""),
        ("  TTFT p50", _sec(jm["ttft_p50_s"]), _sec(jp["ttft_p50_s"]), _x(a["ttft_p50_ratio"])),
        ("  TTFT p99", _sec(jm["ttft_p99_s"]), _sec(jp["ttft_p99_s"]), _x(a["ttft_p99_ratio"])),
        ("  end-to-end p50", _sec(jm["e2e_p50_s"]), _sec(jp["e2e_p50_s"]),
         _x(a["e2e_p50_ratio"])),
        ("  end-to-end p99", _sec(jm["e2e_p99_s"]), _sec(jp["e2e_p99_s"]),
         _x(a["e2e_p99_ratio"])),
        ("throughput (tokens/s)", _num(m["throughput_tokens_per_s"]),
         _num(p["throughput_tokens_per_s"]), ""),
    ]
    for row in rows:
        table.add_row(*row)
    options = ", ".join(f"{k}={v}" for k, v in doc["replay_options"].items())
    notes = [f"replayed with the server's settings: {options}"] + doc["notes"]
    return Group(heading, table, Text("\n".join(f"- {note}" for note in notes), style="dim"))


def _judged_heading(agreement: dict) -> str:
    """"held-out requests 151-300, out of sample": what the latency rows below it are
    judged on (the notes give the whole `ttft_judged_on`)."""
    kind = "out of sample" if agreement["ttft_out_of_sample"] else "IN SAMPLE"
    on = agreement["ttft_judged_on"].split(" (")[0].split(" of ")[0]
    return f"{on.removesuffix(', IN SAMPLE')}, {kind}"


def _int(value) -> str:
    return "not observable" if value is None else f"{value:,}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.2%}"


def _points(value) -> str:
    return "-" if value is None else f"{value:+.2f} pts"


def _x(value) -> str:
    return "-" if value is None else f"x{value:.2f}"


def _num(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def fleet_against_command(workload: str, url: str, *, router: str, options: dict,
                          workers, speedup: float, limit: int | None, vocab_size: int | None,
                          seed: int | None, deployment, json_output: bool, given: dict,
                          cost_model=None, save_cost_model=None,
                          fit_share: float | None = None) -> None:
    """`--against ROUTER_URL`: drive the fleet through its router, predict it (the fleet
    replay with the workers' settings), compare per replica (kvctl/twin/fleet_twin.py)."""
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.replay.mooncake import scan_trace
    from kvctl.twin.fleet_twin import run_fleet_twin

    clashing = [name for name in (*_SERVER_SETTINGS, "plugin_url", "regret") if given.get(name)]
    if clashing:
        flags = ", ".join("--" + name.replace("_", "-") for name in clashing)
        raise InputError(f"--against a router replays with its workers' own settings: drop "
                         f"{flags}")
    options = {k: v for k, v in options.items() if v is not None}
    form = options.pop("request_text", None) or "text"
    if form not in ("text", "input_ids"):
        raise InputError(f"--request-form must be text or input_ids, got {form!r}")
    if save_cost_model is not None:  # before the drive, not after it
        from kvctl.record.writer import check_destination

        check_destination(save_cost_model, what="--save-cost-model", example="clock.json")
    total = scan_trace(workload, limit=limit).requests
    from kvctl.cli.replay_common import ProgressBar

    with ProgressBar(not json_output, "fleet answered", total=total) as bar:
        document = run_fleet_twin(
            workload, url, router=router, router_options=options, workers=workers,
            form=form, speedup=speedup, limit=limit, vocab_size=vocab_size, seed=seed or 0,
            deployment=deployment, cost_model=str(cost_model) if cost_model else None,
            save_cost_model=str(save_cost_model) if save_cost_model else None,
            on_sent=bar.runs_done, fit_share=fit_share)
    if json_output:
        print_json(versioned(document))
    else:
        console().print(render_fleet_twin(document))


def render_fleet_twin(doc: dict):
    """Measured and predicted, for the fleet and per replica, then the agreement and notes."""
    from rich import box
    from rich.console import Group
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.replay_common import fmt_seconds as _sec

    a = doc["agreement"]
    router = doc["router"]
    title = (f"{doc['trace']} against {doc['router_url']} ({router['name']}, "
             f"{len(doc['workers'])} workers, {doc['request_form']} requests, arrivals / "
             f"{doc['speedup']:g})")
    table = FitTable(title=title, title_justify="left", box=box.SIMPLE_HEAD, key_columns=1)
    for column in ("", "requests m / p", "hit rate m / p", "TTFT p50 m / p",
                   "TTFT p99 m / p"):
        table.add_column(column, justify="left" if not column else "right", no_wrap=True)

    def row(name: str, m: dict, p: dict, style=None) -> None:
        table.add_row(name, f"{m['requests']:,} / {p['requests']:,}",
                      f"{_pct(m['hit_rate'])} / {_pct(p['hit_rate'])}",
                      f"{_sec(m['ttft_p50_s'])} / {_sec(p['ttft_p50_s'])}",
                      f"{_sec(m['ttft_p99_s'])} / {_sec(p['ttft_p99_s'])}", style=style)

    row("fleet", doc["fleet"]["measured"], doc["fleet"]["predicted"], "bold")
    for r in doc["replicas"]:
        port = r["worker"].rsplit(":", 1)[-1]
        row(f"replica {r['replica']} (:{port})", r["measured"], r["predicted"])
    lines = [
        f"m = measured on the fleet, p = predicted by the fleet replay "
        f"({doc['clock']['label']})",
        f"hit rate {_points(a['hit_rate_points'])}; equal hit tokens for "
        f"{_pct(a['hit_tokens_equal_share'])} of {a['requests_compared']:,} requests; "
        f"routed to the same replica {_pct(a['same_replica_share'])}",
        f"TTFT on {_judged_heading(a)}: p50 {_x(a['ttft_p50_ratio'])}, p99 "
        f"{_x(a['ttft_p99_ratio'])}",
    ]
    return Group(table, Text("\n".join(lines)),
                 Text("\n".join(f"- {note}" for note in doc["notes"]), style="dim"))

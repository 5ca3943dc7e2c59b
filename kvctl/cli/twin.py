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
                    given: dict) -> None:
    from kvctl.cli.output import console, print_json, versioned
    from kvctl.cli.replay import ProgressBar
    from kvctl.replay.mooncake import scan_trace
    from kvctl.twin.twin_run import run_twin

    clashing = [name for name in _SERVER_SETTINGS if given.get(name)]
    if clashing:
        flags = ", ".join("--" + name.replace("_", "-") for name in clashing)
        raise InputError(f"--against replays with the server's own settings: drop {flags}")
    total = scan_trace(workload, limit=limit).requests
    with ProgressBar(not json_output, "drive (sent and answered)", total=total) as sent, \
            ProgressBar(not json_output, "replay") as replay:
        document = run_twin(workload, url, speedup=speedup, limit=limit, vocab_size=vocab_size,
                            seed=seed or 0, deployment=deployment,
                            on_sent=sent.runs_done if sent.enabled else None,
                            on_replay=replay.replay if replay.enabled else None)
    if json_output:
        print_json(versioned(document))
    else:
        console().print(render_twin(document))


def render_twin(doc: dict):
    """Predicted and measured side by side, then the notes."""
    from rich import box
    from rich.console import Group
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable

    m, p, a = doc["measured"], doc["predicted"], doc["agreement"]
    table = FitTable(title=f"{doc['trace']} against {doc['server']} (arrivals / "
                           f"{doc['speedup']:g})", title_justify="left", box=box.SIMPLE_HEAD)
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
        ("TTFT p50", _sec(m["ttft_p50_s"]), _sec(p["ttft_p50_s"]), _x(a["ttft_p50_ratio"])),
        ("TTFT p99", _sec(m["ttft_p99_s"]), _sec(p["ttft_p99_s"]), _x(a["ttft_p99_ratio"])),
        ("end-to-end p50", _sec(m["e2e_p50_s"]), _sec(p["e2e_p50_s"]), ""),
        ("end-to-end p99", _sec(m["e2e_p99_s"]), _sec(p["e2e_p99_s"]), ""),
        ("throughput (tokens/s)", _num(m["throughput_tokens_per_s"]),
         _num(p["throughput_tokens_per_s"]), ""),
    ]
    for row in rows:
        table.add_row(*row)
    options = ", ".join(f"{k}={v}" for k, v in doc["replay_options"].items())
    notes = [f"replayed with the server's settings: {options}"] + doc["notes"]
    return Group(table, Text("\n".join(f"- {note}" for note in notes), style="dim"))


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


def _sec(value) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"

"""Attach to live SGLang servers and print one snapshot (pool, prefix index, KV events, routing).

Reads `/server_info`, `/metrics` and the KV-event stream of each `--url` (see
engine_adapter/remote). One `--url` prints that worker; several print each worker and the
fleet sum, and `--prompt-file` asks which worker holds the longest cached prefix for a
prompt under seed 003 figure 7's affinity-load objective. Imports neither torch nor sglang.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from kvctl.cli.output import console, print_json, to_jsonable
from kvctl.tui.format import whatif as whatif_line  # one wording with kvctl monitor
from kvctl.tui.host_tier import host_tier_derived, host_tier_rows
from kvctl.cli.fleet_options import RouterMetrics
from kvctl.cli.plugin_options import PluginToken
from kvctl.errors import InputError, RuntimeFailure

if TYPE_CHECKING:
    from engine_adapter.remote.fleet import FleetRead
    from engine_adapter.remote.remote_engine import RemoteRead
    from engine_adapter.snapshot import Snapshot

Opt = typer.Option


def inspect_command(
    url: Annotated[
        list[str],
        Opt(
            "--url",
            help=(
                "SGLang server, http://HOST:PORT (started with --enable-metrics); "
                "repeat for a fleet."
            ),
        ),
    ],
    kv_events: Annotated[
        Optional[list[str]],
        Opt(
            "--kv-events",
            help=(
                "KV-event publisher, tcp://HOST:PORT, per --url in order "
                "(default: the kv_events endpoint the server reports in /server_info)."
            ),
        ),
    ] = None,
    prompt_file: Annotated[
        Optional[Path],
        Opt(
            "--prompt-file",
            help=(
                'Token ids to route: a JSON list, {"token_ids": [...], "cache_salt": ...}, '
                "or whitespace-separated integers."
            ),
        ),
    ] = None,
    cache_salt: Annotated[Optional[str], Opt(help="cache_salt the prompt is sent with.")] = None,
    mu: Annotated[float, Opt(help="Affinity weight mu in [0, 1] (seed 003 fig. 7).")] = 0.5,
    gamma: Annotated[float, Opt(help="Load exponent gamma > 0 (seed 003 fig. 7).")] = 1.0,
    plugin_url: Annotated[
        Optional[list[str]],
        Opt(
            "--plugin-url",
            help=(
                "kvctl plugin endpoint inside the server's scheduler, http://HOST:PORT, per "
                "--url in order (default: the kvctl_plugin entry of /server_info)."
            ),
        ),
    ] = None,
    plugin_token: PluginToken = None,
    router_metrics: RouterMetrics = None,
    wait: Annotated[float, Opt(help="Seconds to let each KV-event mirror replay.")] = 2.0,
    timeout: Annotated[float, Opt(help="HTTP timeout per request, seconds.")] = 2.0,
    json_out: Annotated[bool, Opt("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    if not 0.0 <= mu <= 1.0:
        raise InputError(f"--mu {mu} is outside [0, 1]")
    if gamma <= 0:
        raise InputError(f"--gamma {gamma} must be positive")
    if wait < 0 or timeout <= 0:
        raise InputError("--wait must be >= 0 and --timeout > 0")
    prompt = load_prompt(prompt_file) if prompt_file is not None else None
    salt = cache_salt if cache_salt is not None else (prompt or {}).get("cache_salt")

    from engine_adapter.remote.attach import plan_attach

    plan = plan_attach(url, kv_events=kv_events or (), plugin_urls=plugin_url or (),
                       router_metrics=router_metrics, timeout_s=timeout)
    url, routers = list(plan.workers), list(plan.routers)  # a router's URL: its workers
    fleet = plan.fleet(plugin_token=plugin_token, timeout_s=timeout)
    try:
        fleet.wait_for_events(wait)
        result = fleet.read()
        live = [r for r in result.workers if r.snapshot.connected]
        if not live:
            reasons = "; ".join(f"{r.url}: {r.last_error}" for r in result.workers)
            raise RuntimeFailure(f"no server answered ({reasons})")
        refuse_plugin_misconfiguration(result.workers)
        route = None
        if prompt is not None:
            route = fleet.route(
                result.workers, prompt["token_ids"], cache_salt=salt,
                extra_key=prompt.get("extra_key"), mu=mu, gamma=gamma,
            )  # fmt: skip
    finally:
        fleet.close()
    document = build_document(result, route)
    if routers:
        document["routers"] = routers
    if json_out:
        print_json(document)
    else:
        if routers:
            console().print(f"router {', '.join(routers)}: {len(url)} workers")
        render(result, route)


def load_prompt(path: Path) -> dict[str, Any]:
    """Token ids (and optional cache_salt / extra_key) from a prompt file; InputError otherwise."""
    from kvctl.util.inputs import read_text

    text = read_text(path, what="--prompt-file")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text.replace(",", " ").split()
    if isinstance(parsed, dict):
        prompt = dict(parsed)
        tokens = prompt.get("token_ids")
    else:
        prompt, tokens = {}, parsed
    if not isinstance(tokens, list) or not tokens:
        raise InputError(f"--prompt-file {path}: expected a non-empty list of token ids")
    if any(isinstance(t, str) and not t.strip().isdigit() for t in tokens):
        raise InputError(
            f"--prompt-file {path}: holds text, not token ids (kvctl routes token ids; "
            "tokenize with the server's tokenizer first)"
        )
    if not all(
        isinstance(t, str) or (isinstance(t, int) and not isinstance(t, bool)) for t in tokens
    ):
        raise InputError(f"--prompt-file {path}: token ids must be non-negative integers")
    ids = [int(t) for t in tokens]
    if any(t < 0 for t in ids):
        raise InputError(f"--prompt-file {path}: token ids must be non-negative integers")
    for key in ("cache_salt", "extra_key"):
        if prompt.get(key) is not None and not isinstance(prompt[key], str):
            raise InputError(f"--prompt-file {path}: {key} must be a string")
    return {
        "token_ids": ids,
        "cache_salt": prompt.get("cache_salt"),
        "extra_key": prompt.get("extra_key"),
    }


def refuse_plugin_misconfiguration(workers) -> None:
    """A plugin of another kvctl version, or one refusing our token, is a one-line error
    (exit 2): the operator asked for its numbers and must fix the setup. An unreachable,
    starting or disabled plugin is not: the remote read stands, with the plugin's state."""
    for read in workers:
        plugin = read.plugin
        if plugin is not None and plugin.state in ("schema_mismatch", "unauthorized"):
            raise InputError(" ".join(plugin.error.split()))


# ---- the --json document ------------------------------------------------------------------


def build_document(result: "FleetRead", route) -> dict[str, Any]:
    workers = [_worker_doc(r) for r in result.workers]
    if len(workers) == 1:
        document = workers[0]
    else:
        down = sum(1 for r in result.workers if not r.snapshot.connected)
        document = {"workers": workers, "aggregate": _snapshot_doc(result.aggregate),
                    # the aggregate sums the connected workers only: partial when any is down
                    "workers_down": down, "partial": down > 0}
        if result.aggregate.router is not None:  # the router's own figures (or why none)
            document["router_metrics"] = to_jsonable(result.aggregate.router)
    if route is not None:
        decision, matches = route
        document["route"] = {
            **to_jsonable(decision),
            "novel_suffix_tokens": decision.novel_suffix_tokens,
            "skipped_pages": decision.skipped_pages,
            "matches": to_jsonable(matches),
        }
    return document


def _snapshot_doc(snapshot: "Snapshot") -> dict[str, Any]:
    from kvctl.cli.ledger_rows import terms_sum

    ledger = snapshot.ledger
    return {
        "snapshot": to_jsonable(snapshot),
        "derived": {
            "u_kv": ledger.u_kv,
            "token_usage": ledger.token_usage,
            "evictable_gap": ledger.evictable_gap,
            "residual_tokens": ledger.residual_tokens,
            "ledger_terms_tokens": terms_sum(ledger),  # free+evictable+protected+private
            "hit_rate": snapshot.hit_rate,
            "delta_ref_max": snapshot.refs.delta_ref_max,
            "host": host_tier_derived(snapshot),  # SGLang HiCache; None: no host tier
        },
    }


def _worker_doc(read: "RemoteRead") -> dict[str, Any]:
    rec = read.reconciliation
    return {
        "url": read.url,
        "connected": read.snapshot.connected,
        **_snapshot_doc(read.snapshot),
        "reconciliation": None if rec is None else {
            **to_jsonable(rec), "lower_tokens": rec.lower_tokens, "upper_tokens": rec.upper_tokens,
            "drift_tokens": rec.drift_tokens, "within_tolerance": rec.within_tolerance,
        },
        "mirror": to_jsonable(read.shape),
        "stream": to_jsonable(read.stream),
        "load": {"running": read.running_requests, "queued": read.queued_requests},
        "malformed": {
            "kv_event_messages": read.stream.malformed_messages if read.stream else 0,
            "metric_lines": read.malformed_metric_lines,
            "server_info_replies": read.malformed_server_info,
        },
        "plugin": None if read.plugin is None else {
            "url": read.plugin.url, "state": read.plugin.state, "error": read.plugin.error,
            "kvctl_version": read.plugin.kvctl_version, "health": read.plugin.health,
        },
        "last_error": read.last_error,
    }  # fmt: skip


# ---- Rich rendering -----------------------------------------------------------------------


def _n(value) -> str:
    return "not observable" if value is None else f"{value:,}"


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def render(result: "FleetRead", route) -> None:
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.glossary_terms import FOOTER

    out = console()
    for read in result.workers:
        _render_worker(out, read)
    if len(result.workers) > 1:
        from kvctl.tui.fleet_rows import columns, fleet_rows, router_state

        fleet = FitTable(title="Fleet", show_edge=False)
        for column in columns(result.aggregate):
            fleet.add_column(column, justify="left" if column == "replica" else "right")
        for row in fleet_rows(result.aggregate):
            fleet.add_row(*row)
        out.print(fleet)
        if (line := router_state(result.aggregate.router)) is not None:
            out.print(Text(line))
    if route is not None:
        _render_route(out, *route)
    out.print(f"[dim]{FOOTER}[/dim]")


def _worker_rows(read: "RemoteRead") -> list[tuple[str, str]]:
    from kvctl.cli.ledger_rows import ledger_rows

    s, ledger, c = read.snapshot, read.snapshot.ledger, read.snapshot.counters
    usage = f"{_pct(ledger.u_kv)} / {_pct(ledger.token_usage)}"
    rows = [
        *ledger_rows(s),
        ("U_KV (seed 003 eq. 8) / token_usage", usage),
        ("host tokens", _n(ledger.host_tokens)),
        ("requests / prompt / cached tokens",
         f"{c.requests_finished:,} / {c.prompt_tokens:,} / {c.hit_tokens:,}"),
        ("H_prefix (seed 003 eq. 2)", _pct(s.hit_rate)),
        ("evicted tokens / retractions", f"{c.evicted_tokens:,} / {c.retractions:,}"),
        ("what-if (sampled shadow)", whatif_line(s)),
    ]  # fmt: skip
    rows += host_tier_rows(s)  # SGLang HiCache's host tier (kvctl/tui/host_tier.py)
    if read.plugin is not None:
        rows.append(("kvctl plugin", f"{read.plugin.state}  {read.plugin.url}"))
        refs = s.refs
        if refs.ok is not None:
            rows.append(("delta_ref max / leases (seed 000 0x04B)",
                         f"{_n(refs.delta_ref_max)} / {_n(refs.leases)}"))
    shape = read.shape
    if shape is not None:
        media = ", ".join(f"{m} {t:,}" for m, t in shape.tokens_by_medium) or "0"
        hot = ", ".join(
            f"{h.label} ({h.depth_tokens} tok, {h.attaches}x)" for h in shape.hot_prefixes
        )
        rows += [
            ("mirror pages / tokens by medium", f"{shape.blocks:,} / {media}"),
            ("depth / leaves / max fan-out",
             f"{shape.max_depth_tokens:,} / {shape.leaves:,} / {shape.max_fan_out}"),
            ("largest shared prefix", f"{shape.max_shared_prefix_tokens:,} tokens"),
            ("hot prefixes", hot or "none yet"),
        ]  # fmt: skip
    st = read.stream
    if st is not None:
        events = (
            f"seq {st.next_seq}, gaps {st.gaps_detected} (filled {st.gaps_filled}), "
            f"lost {st.batches_lost}, restarts {st.publisher_restarts}, "
            f"malformed {st.malformed_messages}"
        )
        rows.append(("kv events", events))
    rec = read.reconciliation
    if rec is not None:
        band = (
            f"{rec.mirror_slots:,} vs [{rec.lower_tokens:,}, {rec.upper_tokens:,}], "
            f"drift {rec.drift_tokens:+,} (tolerance {rec.tolerance_tokens:,})"
        )
        rows.append(("mirror slots vs [evictable, evictable+used]", band))
    return rows


def _render_worker(out, read: "RemoteRead") -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    s, info = read.snapshot, read.snapshot.info
    state = "connected" if s.connected else "[red]DISCONNECTED[/]"
    out.print(
        f"[bold]{escape(read.url)}[/]  {escape(info.model or '?')}  "
        f"sglang {info.sglang_version or '?'}  page {info.page_size}  "
        f"policy {info.eviction_policy or '?'}  {state}"
    )
    table = Table(show_header=False, show_edge=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column(justify="right")
    for label, value in _worker_rows(read):
        table.add_row(Text(label), Text(value))  # Text: values hold [brackets], not markup
    out.print(table)
    for alert in s.alerts:
        out.print(f"[yellow]ALERT[/] {alert.name} ({alert.severity}): {escape(alert.evidence)}")
    out.print()


def _render_route(out, decision, matches) -> None:
    from rich.text import Text

    from kvctl.cli.fit_table import FitTable

    title = (
        f"Routing ({decision.prompt_tokens:,} prompt tokens, mu {decision.mu}, "
        f"gamma {decision.gamma}, L_max {decision.max_load})"
    )
    table = FitTable(title=title, show_edge=False)
    for column in ("worker", "cached prefix", "hit", "load", "score"):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for score in decision.scores:
        table.add_row(
            score.name,
            f"{score.matched_tokens:,}",
            _pct(score.hit_ratio),
            str(score.load),
            f"{score.score:.4f}",
        )
    out.print(table)
    for name, reason in decision.excluded:
        out.print(Text(f"excluded {name}: {reason}"))
    if decision.winner is None:
        out.print("[red]no worker can be scored[/] (none connected with a KV-event mirror)")
    else:
        out.print(
            f"route to [bold]{decision.winner}[/]: prefill {decision.novel_suffix_tokens:,} "
            f"novel tokens, skip {decision.skipped_pages:,} pages"
        )

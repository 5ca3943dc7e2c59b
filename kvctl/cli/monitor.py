"""Watch a KV cache live in a terminal UI: pool, prefix reuse, integrity, radix tree, requests.

`kvctl monitor` with no source runs the shipped coding-agents scenario on the embedded
engine (SGLang's real radix cache, on CPU), live. `--scenario FILE` or `--trace FILE` runs
another workload; `--url URL` attaches read-only to a running SGLang server; a router's URL
(or several `--url`) watches the fleet: every replica beside the sum, and the router's own
counts (`--router-metrics`). Keys: `?` help,
`p` pause, `/` filter the tree, `f` flush (embedded only, asks first), `q` quit.
`--json` prints one snapshot instead of starting the UI.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.cli.device_option import DeviceOption, resolve_device_option
from kvctl.cli.fleet_options import RouterMetrics
from kvctl.cli.plugin_options import PluginToken
from kvctl.errors import InputError, RuntimeFailure

Opt = typer.Option


def monitor_command(
    scenario: Annotated[
        Optional[Path],
        Opt(
            "--scenario",
            help="Scenario YAML to run live on the embedded engine (loops with the "
            "next seed). Default: examples/scenarios/coding-agents.yaml.",
        ),
    ] = None,
    trace: Annotated[
        Optional[Path],
        Opt("--trace", help="Trace file to replay live on the embedded engine (once)."),
    ] = None,
    url: Annotated[
        Optional[list[str]],
        Opt("--url", help="Attach read-only to a running SGLang server, http://HOST:PORT; a "
            "router's URL (sglang-router) or several --url: the fleet, every replica."),
    ] = None,
    kv_events: Annotated[
        Optional[str],
        Opt(
            "--kv-events",
            help="With --url: KV-event publisher tcp://HOST:PORT (default: the one "
            "the server reports).",
        ),
    ] = None,
    plugin_url: Annotated[
        Optional[str],
        Opt(
            "--plugin-url",
            help="With --url: the kvctl plugin endpoint inside the server's scheduler "
            "(default: the one its /server_info announces, if any).",
        ),
    ] = None,
    plugin_token: PluginToken = None,
    router_metrics: RouterMetrics = None,
    refresh: Annotated[float, Opt(help="Seconds between screen refreshes.")] = 0.5,
    pace: Annotated[
        float, Opt(help="Embedded workloads: virtual seconds per wall second, idle gaps "
                   "included (the clock waits for the next arrival in wall time); 0 runs as "
                   "fast as the CPU allows, skipping idle gaps. No effect with --url.")
    ] = 1.0,
    seed: Annotated[Optional[int], Opt(help="Workload seed (default: the scenario's).")] = None,
    pool_tokens: Annotated[
        Optional[int], Opt(help="KV pool size in tokens (default: the workload's).")
    ] = None,
    json_out: Annotated[
        bool, Opt("--json", help="Print one snapshot as JSON after one refresh interval; no UI.")
    ] = False,
    device: DeviceOption = None,
) -> None:
    url = url or None  # typer gives [] for a list option not given
    if sum(x is not None for x in (scenario, trace, url)) > 1:
        raise InputError("give at most one of --scenario FILE, --trace FILE, --url URL")
    if refresh <= 0:
        raise InputError(f"--refresh {refresh} must be > 0 seconds")
    if pace < 0:
        raise InputError(f"--pace {pace} must be >= 0")
    if pool_tokens is not None and pool_tokens <= 0:
        raise InputError(f"--pool-tokens {pool_tokens} must be > 0")
    if kv_events is not None and url is None:
        raise InputError("--kv-events only applies with --url")
    if plugin_url is not None and url is None:
        raise InputError("--plugin-url only applies with --url")
    if router_metrics is not None and url is None:
        raise InputError("--router-metrics only applies with a router's --url")
    if url is not None and (seed is not None or pool_tokens is not None):
        raise InputError("--seed and --pool-tokens apply to embedded workloads, not --url")
    resolved_device = resolve_device_option(device, url_given=url is not None)

    from kvctl.tui import sources

    # the live run publishes one snapshot per refresh; the app reads twice per refresh
    common = dict(
        seed=seed, pace=pace or None, pool_tokens=pool_tokens, snapshot_interval_s=refresh,
        device=resolved_device,
    )
    per_server = kv_events is not None or plugin_url is not None
    if url is not None and per_server and (len(url) > 1 or router_metrics is not None):
        raise InputError("--kv-events and --plugin-url apply to one server's --url, not a "
                         "fleet (behind a router each worker's come from its /server_info)")
    fleet = None
    if url is not None and not per_server:  # a router's URL or several: the fleet
        fleet = sources.fleet_source(url, router_metrics=router_metrics,
                                     plugin_token=plugin_token)
    if fleet is not None:
        plan = fleet
    elif url is not None:
        plan = sources.remote_source(url[0], kv_events=kv_events, plugin_url=plugin_url,
                                     plugin_token=plugin_token)
    elif trace is not None:
        plan = sources.embedded_source(trace=trace, **common)
    else:
        plan = sources.embedded_source(scenario=scenario or sources.DEFAULT_SCENARIO, **common)

    if json_out:
        _print_one_snapshot(plan, wait_s=refresh)
        return
    if not (sys.stdin.isatty() and sys.__stderr__.isatty()):
        raise InputError("kvctl monitor needs a terminal; use --json for one snapshot")

    from kvctl.tui.app import make_app

    app = make_app(_frozen_after(plan.build), refresh_s=refresh, label=plan.label)
    app.run()
    if app.failure:
        raise RuntimeFailure(app.failure)


def _frozen_after(build):
    """`build`, then settle the heap for a UI (kvctl/tui/heap.py): only for the UI process,
    which owns its heap."""

    def build_and_freeze():
        from kvctl.tui.heap import settle_heap

        source = build()
        settle_heap()
        return source

    return build_and_freeze


def _print_one_snapshot(plan, *, wait_s: float) -> None:
    from kvctl.cli.output import print_json

    try:
        source = plan.build()
    except ModuleNotFoundError as err:
        raise RuntimeFailure(f"cannot build the engine: {err}") from None
    try:
        time.sleep(wait_s)
        snapshot = source.snapshot()
        error = getattr(source, "error", None)
        down = getattr(source, "last_error", None)  # a remote attach: why it is disconnected
    finally:
        source.close()
    if error:
        raise RuntimeFailure(f"the workload stopped: {error}")
    if not snapshot.connected:  # never print placeholders or stale numbers as a reading
        reason = " ".join(str(down or "the source reports itself disconnected").split())
        raise RuntimeFailure(f"no server answered ({reason})")
    print_json({"source": plan.label, "read_only": plan.read_only, "snapshot": snapshot})


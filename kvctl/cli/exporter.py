"""Serve Prometheus /metrics (and OTLP spans) for a workload on the embedded engine or a live server.

`kvctl exporter --scenario FILE | --trace FILE` runs the workload on the embedded engine in
a background thread (a `LiveRun`, paced on the virtual clock, looping) and serves `/metrics`
on 127.0.0.1:9464 until Ctrl-C or `--duration`. `--url URL` (repeatable: a fleet) instead
re-exports kvctl's metrics for running SGLang servers, read-only. Receipts become
OpenTelemetry spans only when OTEL_EXPORTER_OTLP_ENDPOINT is set. Tenant namespaces are
hashed with $KVCTL_NAMESPACE_SALT (random per run when unset) unless allow-listed.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.cli.output import console, print_json_line
from kvctl.cli.device_option import DeviceOption, resolve_device_option
from kvctl.cli.fleet_options import RouterMetrics
from kvctl.cli.plugin_options import PluginToken
from kvctl.errors import InputError, RuntimeFailure

Opt = typer.Option


def exporter_command(
    scenario: Annotated[Optional[Path], Opt(
        "--scenario", help="Scenario YAML to run on the embedded engine (loops).")] = None,
    trace: Annotated[Optional[Path], Opt(
        "--trace", help="Mooncake-format JSONL trace to replay on the embedded engine (loops).")]
    = None,
    url: Annotated[Optional[list[str]], Opt(
        "--url", help="A running SGLang server to re-export (repeatable: a fleet).")] = None,
    kv_events: Annotated[Optional[list[str]], Opt(
        "--kv-events", help="KV-event endpoint per --url (default: from its server info).")] = None,
    plugin_url: Annotated[Optional[list[str]], Opt(
        "--plugin-url", help="kvctl plugin endpoint per --url (default: from its server info); "
        "its ledger, delta_ref and funnel are exported under the embedded engine's names.")]
    = None,
    plugin_token: PluginToken = None,
    router_metrics: RouterMetrics = None,
    host: Annotated[str, Opt(help="Address to listen on (loopback unless you say otherwise).")]
    = "127.0.0.1",
    port: Annotated[int, Opt(help="Port for /metrics; 0 picks a free one.")] = 9464,
    interval: Annotated[float, Opt(
        help="Seconds between snapshot refreshes and span exports.")] = 1.0,
    pace: Annotated[float, Opt(
        help="Embedded workloads: virtual seconds per wall second, idle gaps included (the "
        "clock waits for the next arrival in wall time); 0 runs as fast as the CPU allows, "
        "skipping idle gaps. No effect with --url.")] = 1.0,
    pool_tokens: Annotated[Optional[int], Opt(
        help="KV pool size in tokens (default: the scenario's, or 262144 for a trace).")] = None,
    duration: Annotated[Optional[float], Opt(
        help="Stop after this many seconds (default: run until Ctrl-C).")] = None,
    allow_namespace: Annotated[Optional[list[str]], Opt(
        "--allow-namespace", help="Namespace label exported verbatim (repeatable); "
        "all others are hashed.")] = None,
    json_out: Annotated[bool, Opt(
        "--json", help="Print the listening address as one JSON line, then serve.")] = False,
    device: DeviceOption = None,
) -> None:
    if sum(x is not None and x != [] for x in (scenario, trace, url)) != 1:
        raise InputError("give exactly one of --scenario FILE, --trace FILE or --url URL")
    workload = scenario or trace or " ".join(url)
    kind = "scenario" if scenario is not None else ("trace" if trace is not None else "url")
    if interval <= 0:
        raise InputError(f"--interval {interval} must be > 0 seconds")
    if pace < 0:
        raise InputError(f"--pace {pace} must be >= 0")
    if duration is not None and duration <= 0:
        raise InputError(f"--duration {duration} must be > 0 seconds")
    if pool_tokens is not None and pool_tokens <= 0:
        raise InputError(f"--pool-tokens {pool_tokens} must be > 0")
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port} is out of range 0-65535")
    if plugin_url and not url:
        raise InputError("--plugin-url only applies with --url")
    resolved_device = resolve_device_option(device, url_given=bool(url))

    from engine_adapter.stdout_lock import STDOUT_LOCK
    from telemetry.hygiene import NamespaceLabeler
    from telemetry.otel import from_environment, otlp_enabled
    from telemetry.service import run_exporter

    labeler = NamespaceLabeler(allow=allow_namespace or ())
    source = _source(scenario=scenario, trace=trace, urls=url, kv_events=kv_events or [],
                     plugin_urls=plugin_url or [], plugin_token=plugin_token,
                     router_metrics=router_metrics, pace=pace or None,
                     interval_s=interval, pool_tokens=pool_tokens,
                     receipts=otlp_enabled(), device=resolved_device)
    try:
        info = source.snapshot().info
        spans = from_environment(labeler=labeler, resource_attributes={
            "kvctl.engine": info.engine, "kvctl.tree_core": info.tree_core,
            "kvctl.eviction_policy": info.eviction_policy, "kvctl.page_size": info.page_size,
        })

        def announce(server) -> None:
            document = {"url": server.url, "host": server.host, "port": server.port,
                        "kind": kind, "workload": str(workload), "pace": pace,
                        "interval_s": interval, "otlp": spans is not None,
                        "loopback": _is_loopback(server.host)}
            if json_out:  # one line, so a parent process can read the address and go on
                print_json_line(document)
                return
            with STDOUT_LOCK:  # the live run's worker may be redirecting fd 1 right now
                out = console()
                out.print(f"kvctl exporter: serving [bold]{server.url}[/bold] ({kind} "
                          f"{workload}, pace {pace or 'max'}); Ctrl-C to stop", soft_wrap=True)
                if not document["loopback"]:
                    out.print(f"[yellow]warning:[/yellow] listening on {server.host}: "
                              "reachable from other hosts", soft_wrap=True)
                if spans is not None:
                    out.print("OpenTelemetry: exporting receipt spans over OTLP/HTTP")

        run_exporter(source, host=host, port=port, interval_s=interval, duration_s=duration,
                     labeler=labeler, spans=spans, on_ready=announce)
    finally:
        source.close()
    error = getattr(source, "error", None)  # a live run whose worker died
    if error:
        raise RuntimeFailure(f"the workload stopped: {error}")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _source(*, scenario, trace, urls, kv_events, plugin_urls, plugin_token, pace, interval_s,
            pool_tokens, receipts, device="cpu", router_metrics=None):
    """The snapshot source to export: a live run on the embedded engine, one remote server
    (with its kvctl plugin when there is one), or a fleet of them (the aggregate, every
    replica and the router's figures: engine_adapter/remote/attach.py). Bad input fails
    here, before anything runs."""
    if urls:
        from engine_adapter.remote.attach import plan_attach

        plan = plan_attach(urls, kv_events=kv_events, plugin_urls=plugin_urls,
                           router_metrics=router_metrics)
        if not plan.is_fleet:
            from engine_adapter.remote.remote_engine import RemoteEngine

            if len(plugin_urls) > 1:
                raise InputError(f"{len(plugin_urls)} --plugin-url for 1 --url")
            return RemoteEngine(plan.workers[0], kv_events=kv_events[0] if kv_events else None,
                                plugin_url=plugin_urls[0] if plugin_urls else None,
                                plugin_token=plugin_token)
        return plan.fleet(plugin_token=plugin_token)
    if router_metrics is not None:
        raise InputError("--router-metrics only applies with a router's --url")
    from kvctl.replay.live_sources import plan_live_run

    plan = plan_live_run(scenario=scenario, trace=trace, pace=pace, pool_tokens=pool_tokens,
                         snapshot_interval_s=interval_s, receipts=receipts, device=device)
    return plan.build()

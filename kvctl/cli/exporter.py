"""Serve Prometheus /metrics (and OTLP spans) for the embedded engine running a workload.

`kvctl exporter --scenario FILE | --trace FILE` runs the workload on the embedded engine in
a background thread (a `LiveRun`, paced on the virtual clock, a scenario looping with the
next seed) and serves `/metrics` on 127.0.0.1:9464 until Ctrl-C or `--duration`. Receipts
become OpenTelemetry spans only when OTEL_EXPORTER_OTLP_ENDPOINT is set. Tenant namespaces
are hashed with $KVCTL_NAMESPACE_SALT (random per run when unset) unless allow-listed.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.cli.output import console
from kvctl.errors import InputError, RuntimeFailure

Opt = typer.Option
TRACE_POOL_TOKENS = 262_144  # NoOp pool: slots cost no memory; >= 2 of the largest request


def exporter_command(
    scenario: Annotated[Optional[Path], Opt(
        "--scenario", help="Scenario YAML to run on the embedded engine (loops).")] = None,
    trace: Annotated[Optional[Path], Opt(
        "--trace", help="Mooncake-format JSONL trace to replay on the embedded engine (once).")]
    = None,
    host: Annotated[str, Opt(help="Address to listen on (loopback unless you say otherwise).")]
    = "127.0.0.1",
    port: Annotated[int, Opt(help="Port for /metrics; 0 picks a free one.")] = 9464,
    interval: Annotated[float, Opt(
        help="Seconds between snapshot refreshes and span exports.")] = 1.0,
    pace: Annotated[float, Opt(
        help="Virtual seconds per wall second; 0 runs as fast as the CPU allows.")] = 1.0,
    pool_tokens: Annotated[Optional[int], Opt(
        help="KV pool size in tokens (default: the scenario's, or 262144 for a trace).")] = None,
    duration: Annotated[Optional[float], Opt(
        help="Stop after this many seconds (default: run until Ctrl-C).")] = None,
    allow_namespace: Annotated[Optional[list[str]], Opt(
        "--allow-namespace", help="Namespace label exported verbatim (repeatable); "
        "all others are hashed.")] = None,
    json_out: Annotated[bool, Opt(
        "--json", help="Print the listening address as one JSON line, then serve.")] = False,
) -> None:
    if (scenario is None) == (trace is None):
        raise InputError("give exactly one of --scenario FILE or --trace FILE")
    workload = scenario if scenario is not None else trace
    kind = "scenario" if scenario is not None else "trace"
    if not workload.is_file():
        raise InputError(f"--{kind} {workload}: no such file")
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

    from telemetry.hygiene import NamespaceLabeler
    from telemetry.otel import from_environment, otlp_enabled
    from telemetry.service import run_exporter

    labeler = NamespaceLabeler(allow=allow_namespace or ())
    run = _start_live_run(scenario=scenario, trace=trace, pace=pace or None,
                          interval_s=interval, pool_tokens=pool_tokens,
                          receipts=otlp_enabled())
    source = _ReportsRunFailure(run)
    try:
        info = run.snapshot().info
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
                typer.echo(json.dumps(document))
                return
            console().print(f"kvctl exporter: serving [bold]{server.url}[/bold] ({kind} "
                            f"{workload}, pace {pace or 'max'}); Ctrl-C to stop", soft_wrap=True)
            if not document["loopback"]:
                console().print(f"[yellow]warning:[/yellow] listening on {server.host}: "
                                "reachable from other hosts", soft_wrap=True)
            if spans is not None:
                console().print("OpenTelemetry: exporting receipt spans over OTLP/HTTP")

        run_exporter(source, host=host, port=port, interval_s=interval, duration_s=duration,
                     labeler=labeler, spans=spans, on_ready=announce)
    finally:
        run.close()
    if run.error:
        raise RuntimeFailure(f"the workload stopped: {run.error}")


class _ReportsRunFailure:
    """A LiveRun whose snapshot() raises once its worker thread died, so scrapes report
    kvctl_up 0 instead of serving the last snapshot forever."""

    def __init__(self, run) -> None:
        self._run = run

    def snapshot(self):
        if self._run.error:
            raise RuntimeFailure(f"the workload stopped: {self._run.error}")
        return self._run.snapshot()

    def take_receipts(self):
        return self._run.take_receipts()

    def close(self) -> None:
        self._run.close()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _start_live_run(*, scenario: Path | None, trace: Path | None, pace: float | None,
                    interval_s: float, pool_tokens: int | None, receipts: bool):
    """Build the embedded engine for the workload and start it in a LiveRun (InputError for a
    bad workload file, before anything runs)."""
    if scenario is not None:
        from kvctl.replay.scenario import load_scenario

        first = load_scenario(scenario)
        seed = first.scenario.seed

        def drivers(iteration: int):
            return first if iteration == 0 else load_scenario(scenario, seed=seed + iteration)

        defaults, loop = dict(first.engine_defaults), True
    else:
        from kvctl.replay.mooncake import MooncakeDriver, scan_trace

        summary = scan_trace(trace)
        defaults = {"pool_tokens": TRACE_POOL_TOKENS,
                    "max_context_len": max(32_768, summary.max_request_tokens)}

        def drivers(iteration: int):
            return MooncakeDriver(trace, summary=summary)

        loop = False  # a trace's request ids and arrival times do not restart on a warm engine
    pool = pool_tokens if pool_tokens is not None else defaults.pop("pool_tokens", None)
    defaults.pop("pool_tokens", None)

    from engine_adapter.embedded.engine import EmbeddedEngine  # imports SGLang: seconds
    from engine_adapter.live import LiveRun
    from kvctl.replay.engine_setup import engine_config

    config = engine_config(pool_tokens=pool, receipts=receipts, **defaults)
    engine = EmbeddedEngine(config)
    return LiveRun(engine, drivers, pace=pace, loop=loop, snapshot_interval_s=interval_s).start()

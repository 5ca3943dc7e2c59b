"""Start SGLang's own server on this CPU with kvctl's plugin, to try every live command on.

`kvctl sandbox` runs `python -m sglang.launch_server` (SGLang's HTTP server, scheduler,
radix cache, allocator, /metrics, KV events) with a tiny random-weight Llama on this machine's
CPU, kvctl's plugin inside its scheduler, and prints the commands to try against it. It
serves until Ctrl-C (or SIGTERM), then stops the server and removes its temp directory.
`--traffic` sends a built-in shared-prefix workload so the numbers move; `--json` prints one
line once ready (url, plugin_url, kv_events) and serves until killed. A port in use, or a
server that does not come up, is one line (with the server log's tail) and a non-zero exit.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.errors import RuntimeFailure

Opt = typer.Option


def sandbox_command(
    port: Annotated[int, Opt(help="HTTP port of the server; 0 picks free ports for "
                                  "everything.")] = 30000,
    plugin_port: Annotated[int, Opt(help="First port of kvctl's plugin (one per DP rank); "
                                         "0 picks free ones (the default with --port 0).")]
    = 30100,
    page_size: Annotated[int, Opt(help="Tokens per KV page (SGLang's --page-size).")] = 4,
    pool_tokens: Annotated[int, Opt(help="KV pool size in tokens (--max-total-tokens).")]
    = 4096,
    context_length: Annotated[int, Opt(help="Longest prompt + reply, in tokens.")] = 1024,
    max_running: Annotated[int, Opt(help="Requests decoding at once "
                                         "(--max-running-requests).")] = 8,
    dp_size: Annotated[int, Opt(help="Data-parallel ranks, one CPU core each (--dp-size).")]
    = 1,
    eviction: Annotated[str, Opt(help="Radix eviction policy (--radix-eviction-policy): "
                                      "lru, lfu, slru, priority, tlru.")] = "lru",
    schedule_policy: Annotated[str, Opt(help="SGLang's --schedule-policy (fcfs, lpm, ...).")]
    = "fcfs",
    hicache_ratio: Annotated[Optional[float], Opt(help=(
        "Turn on SGLang's HiCache: a host-memory tier of RATIO x the device pool "
        "(--enable-hierarchical-cache --hicache-ratio; docs/hicache.md)."))] = None,
    hicache_write_policy: Annotated[str, Opt(help=(
        "With --hicache-ratio: write_through, write_through_selective or write_back."))]
    = "write_through",
    record: Annotated[bool, Opt("--record", help="Let `kvctl record` take a trace from it "
                                                 "(KVCTL_RECORD=1).")] = False,
    traffic: Annotated[bool, Opt("--traffic", help="Send a built-in shared-prefix workload "
                                                   "while it serves.")] = False,
    json_out: Annotated[bool, Opt("--json", help="Print one JSON line once ready, then serve "
                                                 "until killed.")] = False,
    dry_run: Annotated[bool, Opt("--dry-run", help="Print the server's command line and "
                                                   "environment, start nothing.")] = False,
    startup_timeout: Annotated[float, Opt(help="Seconds to wait for the server.")] = 600.0,
) -> None:
    from kvctl.sandbox.config import SandboxConfig

    config = SandboxConfig(
        port=port, plugin_port=plugin_port if port else 0, page_size=page_size,
        pool_tokens=pool_tokens, context_length=context_length, max_running=max_running,
        dp_size=dp_size, eviction=eviction, schedule_policy=schedule_policy, record=record,
        hicache_ratio=hicache_ratio, hicache_write_policy=hicache_write_policy,
    )  # fmt: skip
    config.check()
    workdir = Path(tempfile.mkdtemp(prefix="kvctl-sandbox-"))
    keep = False
    try:
        from kvctl.sandbox.launcher import SandboxServer

        server = SandboxServer(config, workdir)
        if dry_run:
            _print_dry_run(server)
            return
        keep = True  # a failed start keeps its log for the one-line error to point at
        _serve(server, traffic=traffic, json_out=json_out, timeout_s=startup_timeout)
        keep = False
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


class _Stop(Exception):
    """SIGTERM, turned into the same clean stop as Ctrl-C."""


def _on_sigterm(signum, frame) -> None:
    raise _Stop()


def _serve(server, *, traffic: bool, json_out: bool, timeout_s: float) -> None:
    from kvctl.cli.output import console, print_json_line
    from kvctl.cli.sandbox_text import banner, progress_line

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    load = None
    try:
        if not json_out:
            console().print(progress_line(server), soft_wrap=True)
        with console().status("starting SGLang on this CPU", spinner="dots") if (
                not json_out and console().is_terminal) else _nothing():
            seconds = server.start(timeout_s=timeout_s)
        if traffic:
            from kvctl.sandbox.traffic import Traffic

            load = Traffic(server.url).start()
        if json_out:
            print_json_line(ready_document(server, traffic=traffic))
        else:
            console().print(banner(server, seconds, traffic=traffic), soft_wrap=True)
        while server.process.poll() is None:
            time.sleep(0.5)
        raise RuntimeFailure(f"the SGLang server exited {server.process.returncode}; log "
                             f"{server.log_path}: ... {server.short_tail()}")
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if load is not None:
            load.stop(timeout_s=5)
        server.stop()
    if not json_out:
        sent = f"; traffic sent {load.sent} requests" if load is not None else ""
        console().print(f"kvctl sandbox: stopped{sent}", soft_wrap=True)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def ready_document(server, *, traffic: bool) -> dict:
    """The `--json` line: where everything is, once the server answers."""
    return {"url": server.url, "plugin_url": server.plugin_url,
            "plugin_urls": server.plugin_urls, "kv_events": server.events_endpoint,
            "dp_size": server.config.dp_size, "page_size": server.config.page_size,
            "pool_tokens": server.config.pool_tokens, "record": server.config.record,
            "traffic": traffic, "startup_s": round(server.startup_s or 0.0, 1),
            "pid": server.process.pid, "log": str(server.log_path)}


def _print_dry_run(server) -> None:
    import shlex

    from kvctl.cli.output import console

    env = server.environment()
    keys = sorted(k for k in env if k.startswith(("KVCTL_", "SGLANG_", "OMP_")) or
                  k == "PYTHONPATH")
    lines = [f"{k}={shlex.quote(env[k])} \\" for k in keys]
    console().print("\n".join(lines + [shlex.join(server.command())]), soft_wrap=True,
                    markup=False, highlight=False)

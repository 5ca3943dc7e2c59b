"""Start SGLang's own server on this CPU with kvctl's plugin, to try every live command on.

`kvctl sandbox` runs `python -m sglang.launch_server` (SGLang's HTTP server, scheduler,
radix cache, allocator, /metrics, KV events) with a tiny random-weight Llama on this machine's
CPU, kvctl's plugin inside its scheduler, and prints the commands to try against it. It
serves until Ctrl-C (or SIGTERM), then stops the server and removes its temp directory.
`--traffic` sends a built-in shared-prefix workload so the numbers move; `--json` prints one
line once ready (url, plugin_url, kv_events) and serves until killed. A port in use, or a
server that does not come up, is one line (with the server log's tail) and a non-zero exit.

`--replicas N --router POLICY` starts a fleet instead (kvctl/sandbox/fleet.py): N such
servers, each with its plugin, behind SGLang's own router (sglang-router 0.3.2) at `--port`;
`--traffic` then goes through the router as text. The server loads the sandbox model's
one-character-per-id tokenizer (kvctl/sandbox/tokenizer.py), so requests may carry `text`
as well as `input_ids`; `--no-tokenizer` keeps `--skip-tokenizer-init` (single server only).
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
    startup_timeout: Annotated[Optional[float], Opt(help=(
        "Seconds to wait for the server (600; a fleet: 300 per round of one worker per "
        "CPU core, + 300)."), show_default=False)] = None,
    tokenizer: Annotated[bool, Opt("--tokenizer/--no-tokenizer", help=(
        "Load the model's one-character-per-id tokenizer, so requests may carry text "
        "(--no-tokenizer: --skip-tokenizer-init, input_ids only; not with --replicas)."))]
    = True,
    replicas: Annotated[Optional[int], Opt(help=(
        "Start a fleet: this many servers behind SGLang's router (1-8; --port is then "
        "the router's)."), show_default=False)] = None,
    router: Annotated[Optional[str], Opt(help=(
        "The fleet's routing policy: cache_aware, round_robin, random, power_of_two, "
        "manual (sglang-router 0.3.2's --policy; default cache_aware)."),
        show_default=False)] = None,
    cache_threshold: Annotated[Optional[float], Opt(help=(
        "Router: share of a prompt a worker's tree must match to win it (0-1; 0.3)."),
        show_default=False)] = None,
    balance_abs_threshold: Annotated[Optional[int], Opt(help=(
        "Router: in-flight request difference above which it balances load (64)."),
        show_default=False)] = None,
    balance_rel_threshold: Annotated[Optional[float], Opt(help=(
        "Router: ... and max load above min load x this (>= 1; 1.5)."),
        show_default=False)] = None,
    eviction_interval: Annotated[Optional[int], Opt(help=(
        "Router: seconds between evictions of its approximate trees (60)."),
        show_default=False)] = None,
    max_tree_size: Annotated[Optional[int], Opt(help=(
        "Router: nodes per approximate tree before eviction (67108864)."),
        show_default=False)] = None,
) -> None:
    from kvctl.sandbox.config import SandboxConfig

    config = SandboxConfig(
        port=port, plugin_port=plugin_port if port else 0, page_size=page_size,
        pool_tokens=pool_tokens, context_length=context_length, max_running=max_running,
        dp_size=dp_size, eviction=eviction, schedule_policy=schedule_policy, record=record,
        hicache_ratio=hicache_ratio, hicache_write_policy=hicache_write_policy,
        tokenizer=tokenizer,
    )  # fmt: skip
    router_options = {"cache_threshold": cache_threshold,
                      "balance_abs_threshold": balance_abs_threshold,
                      "balance_rel_threshold": balance_rel_threshold,
                      "eviction_interval_s": eviction_interval, "max_tree_size": max_tree_size}
    fleet = fleet_options(replicas, router, router_options, tokenizer=tokenizer)
    config.check()
    workdir = Path(tempfile.mkdtemp(prefix="kvctl-sandbox-"))
    keep = False
    try:
        if fleet is not None:
            from kvctl.sandbox.fleet import SandboxFleet

            server = SandboxFleet(config, workdir, replicas=fleet[0], router=fleet[1])
        else:
            from kvctl.sandbox.launcher import SandboxServer

            server = SandboxServer(config, workdir)
        if dry_run:
            _print_dry_run(server)
            return
        keep = True  # a failed start keeps its log for the one-line error to point at
        if fleet is not None:
            from kvctl.sandbox.fleet import default_startup_timeout

            wait = startup_timeout or default_startup_timeout(fleet[0])
            _serve_fleet(server, traffic=traffic, json_out=json_out, timeout_s=wait)
        else:
            _serve(server, traffic=traffic, json_out=json_out,
                   timeout_s=startup_timeout or 600.0)
        keep = False
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


_FLAGS = {"cache_threshold": "--cache-threshold", "balance_abs_threshold":
          "--balance-abs-threshold", "balance_rel_threshold": "--balance-rel-threshold",
          "eviction_interval_s": "--eviction-interval", "max_tree_size": "--max-tree-size"}


def fleet_options(replicas: int | None, policy: str | None, options: dict, *,
                  tokenizer: bool = True):
    """(replicas, RouterConfig) for a fleet, None for one server; InputError naming the
    option for anything wrong, before anything starts."""
    from kvctl.errors import InputError
    from kvctl.sandbox.fleet import RouterConfig, check_replicas

    given = {k: v for k, v in options.items() if v is not None}
    if replicas is None:
        if policy is not None:
            raise InputError(f"--router {policy} needs --replicas N (the servers it routes "
                             f"to; --replicas 1 is one server behind the router)")
        if given:
            raise InputError(f"{_FLAGS[next(iter(given))]} is a router option: give "
                             f"--replicas N --router POLICY")
        return None
    check_replicas(replicas)
    if not tokenizer:
        raise InputError("--no-tokenizer does not go with --replicas: the fleet's router "
                         "routes on request text, which the workers' tokenizer reads")
    router = RouterConfig(policy=policy or "cache_aware", **given)
    router.check()
    return replicas, router


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


def _serve_fleet(fleet, *, traffic: bool, json_out: bool, timeout_s: float) -> None:
    from kvctl.cli.output import console, print_json_line
    from kvctl.cli.sandbox_text import fleet_banner, fleet_progress_line

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    load = None
    try:
        if not json_out:
            console().print(fleet_progress_line(fleet), soft_wrap=True)
        with console().status("starting SGLang's servers and router on this CPU",
                              spinner="dots") if (
                not json_out and console().is_terminal) else _nothing():
            seconds = fleet.start(timeout_s=timeout_s)
        if traffic:
            from kvctl.sandbox.traffic import Traffic

            load = Traffic(fleet.url, text=True).start()
        if json_out:
            print_json_line(fleet_ready_document(fleet, traffic=traffic))
        else:
            console().print(fleet_banner(fleet, seconds, traffic=traffic), soft_wrap=True)
        while (gone := fleet.exited()) is None:
            time.sleep(0.5)
        raise RuntimeFailure(gone)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if load is not None:
            load.stop(timeout_s=5)
        fleet.stop()
    if not json_out:
        sent = f"; traffic sent {load.sent} requests" if load is not None else ""
        console().print(f"kvctl sandbox: stopped the router and {len(fleet.servers)} "
                        f"servers{sent}", soft_wrap=True)


def fleet_ready_document(fleet, *, traffic: bool) -> dict:
    """The fleet's `--json` line: the router (the URL clients use), its options, each worker."""
    from kvctl.sandbox.fleet import installed_router_version
    from kvctl.sandbox.tokenizer import BASE

    c = fleet.config
    return {
        "url": fleet.url,
        "router": {**fleet.router.describe(), "version": installed_router_version(),
                   "metrics_url": fleet.metrics_url, "pid": fleet.process.pid,
                   "log": str(fleet.log_path)},
        "workers": [{"url": s.url, "plugin_url": s.plugin_url, "plugin_urls": s.plugin_urls,
                     "kv_events": s.events_endpoint, "pid": s.process.pid,
                     "log": str(s.log_path), "startup_s": round(s.startup_s or 0.0, 1)}
                    for s in fleet.servers],
        "replicas": len(fleet.servers), "dp_size": c.dp_size, "page_size": c.page_size,
        "pool_tokens": c.pool_tokens, "record": c.record, "traffic": traffic,
        "text": f"one character per token id: chr(0x{BASE:X} + id)",
        "model": str(fleet.model_dir), "startup_s": round(fleet.startup_s or 0.0, 1)}


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

    def launch(one) -> list[str]:
        env = one.environment()
        keys = sorted(k for k in env if k.startswith(("KVCTL_", "SGLANG_", "OMP_")) or
                      k == "PYTHONPATH")
        return [f"{k}={shlex.quote(env[k])} \\" for k in keys] + [shlex.join(one.command())]

    if hasattr(server, "servers"):  # a fleet: every worker, then the router
        lines = []
        for k, one in enumerate(server.servers):
            lines += [f"# worker {k}", *launch(one)]
        lines += ["# router", shlex.join(server.router_command())]
    else:
        lines = launch(server)
    console().print("\n".join(lines), soft_wrap=True, markup=False, highlight=False)

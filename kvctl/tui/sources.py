"""Build the snapshot source `kvctl monitor` watches (validated up front, built lazily).

Each builder checks its input at once (a missing file or bad YAML is an InputError before
any UI starts) and returns a zero-argument factory; the app calls it in a worker thread,
because the embedded engine imports SGLang (seconds, the first time).

    scenario  -> LiveRun on the embedded engine (kvctl.replay.live_sources; loops, next seed)
    trace     -> LiveRun on the embedded engine (a Mooncake trace; loops)
    url       -> engine_adapter.remote.remote_engine.RemoteEngine (read-only; with the kvctl
                 plugin's endpoint when given or announced in /server_info)
    router URL, or several URLs
              -> engine_adapter.remote.fleet.Fleet through the attach plan inspect and the
                 exporter use (engine_adapter/remote/attach.py): the sum, every replica and
                 the router's own figures in one snapshot (read-only)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine_adapter.protocol import SnapshotSource
from kvctl.errors import InputError
from kvctl.replay.live_sources import plan_live_run

DEFAULT_SCENARIO = (
    Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "coding-agents.yaml"
)
TREE_INTERVAL_S = 1.0  # per-node reads walk the whole tree: about once a second


@dataclass(frozen=True, kw_only=True)
class SourcePlan:
    """What to watch: a label for the status line and a factory for the source."""

    label: str
    build: Callable[[], SnapshotSource]
    read_only: bool


def embedded_source(
    *,
    scenario: Path | None = None,
    trace: Path | None = None,
    seed: int | None,
    pace: float | None,
    pool_tokens: int | None,
    snapshot_interval_s: float,
    device: str = "cpu",
) -> SourcePlan:
    """A scenario or a trace running live on the embedded engine (validated now)."""
    plan = plan_live_run(scenario=scenario, trace=trace, seed=seed, pace=pace,
                         pool_tokens=pool_tokens, snapshot_interval_s=snapshot_interval_s,
                         tree_interval_s=TREE_INTERVAL_S, device=device)
    return SourcePlan(label=plan.label, build=plan.build, read_only=False)


def remote_source(url: str, *, kv_events: str | None, plugin_url: str | None = None,
                  plugin_token: str | None = None) -> SourcePlan:
    try:
        from engine_adapter.remote.http_fetch import normalize_base_url
        from engine_adapter.remote.remote_engine import RemoteEngine
    except ModuleNotFoundError as err:
        if err.name and err.name.startswith("engine_adapter.remote"):
            raise InputError(
                "--url needs engine_adapter.remote, which this checkout lacks"
            ) from None
        raise
    base = normalize_base_url(url)  # InputError for a malformed URL
    if plugin_url is not None:
        from engine_adapter.remote.plugin_client import PluginClient

        plugin_url = PluginClient(plugin_url).url  # InputError for a malformed URL, now

    def build() -> SnapshotSource:
        return RemoteEngine(base, kv_events=kv_events, plugin_url=plugin_url,
                            plugin_token=plugin_token)

    plugin = f", plugin {plugin_url}" if plugin_url else ""
    return SourcePlan(label=f"{base} (remote{plugin}, read-only)", build=build, read_only=True)


def fleet_source(urls: list[str], *, router_metrics: str | None,
                 plugin_token: str | None = None) -> SourcePlan | None:
    """A fleet when `urls` name a router or several servers; None for one plain server
    (then `remote_source`). Routers are expanded now (GET /workers), before the UI starts."""
    from engine_adapter.remote.attach import plan_attach
    from engine_adapter.remote.http_fetch import normalize_base_url

    urls = [normalize_base_url(u) for u in urls]  # InputError for a malformed URL
    plan = plan_attach(urls, router_metrics=router_metrics)
    if not plan.is_fleet:
        return None
    where = ", ".join(plan.routers) if plan.routers else f"{len(plan.workers)} servers"
    label = f"fleet {where}: {len(plan.workers)} replicas (remote, read-only)"
    return SourcePlan(label=label, build=lambda: plan.fleet(plugin_token=plugin_token),
                      read_only=True)

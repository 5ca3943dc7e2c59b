"""From the `--url`s an operator gives to what kvctl reads: one server, or a fleet.

    plan = plan_attach(["http://router:8000"], router_metrics=None)
    plan.workers   ["http://w0:30000", "http://w1:30001"]   (the router's GET /workers)
    plan.routers   ["http://router:8000"]
    plan.router_metrics  "http://router:29000/metrics"       (0.3.2's default port)
    plan.fleet(plugin_token=..., timeout_s=...)  -> Fleet (its snapshot: the sum, every
                                                    replica, the router's figures)

`kvctl inspect`, `kvctl exporter` and `kvctl monitor` all attach through here, so a router
URL means the same fleet to each. One plain server URL stays one server (`is_fleet` False):
the caller reads it with a RemoteEngine, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine_adapter.base.errors import InputError
from engine_adapter.remote.router_workers import expand


@dataclass(frozen=True, kw_only=True)
class AttachPlan:
    """What to read; `kv_events` / `plugin_urls` per worker, in order (may be shorter)."""

    given: tuple[str, ...]
    workers: tuple[str, ...]
    routers: tuple[str, ...]
    router_metrics: str | None
    kv_events: tuple[str, ...] = ()
    plugin_urls: tuple[str, ...] = ()

    @property
    def is_fleet(self) -> bool:
        return bool(self.routers) or len(self.workers) > 1 or len(self.given) > 1

    def fleet(self, **options):
        """The Fleet of every worker (options: plugin_token, timeout_s)."""
        from engine_adapter.remote.fleet import Fleet

        return Fleet(list(self.workers), kv_events=self.kv_events,
                     plugin_urls=self.plugin_urls, router_metrics=self.router_metrics,
                     **options)


def plan_attach(urls: Sequence[str], *, kv_events: Sequence[str] = (),
                plugin_urls: Sequence[str] = (), router_metrics: str | None = None,
                timeout_s: float = 2.0) -> AttachPlan:
    """Expand routers to their workers (router_workers.py). InputError, before anything is
    read: per-worker endpoints given behind a router (its workers name their own), or
    `--router-metrics` without a router. The router's metrics address: `router_metrics`,
    else 0.3.2's default port on the (first) router's host."""
    import urllib.parse

    from engine_adapter.remote.http_fetch import normalize_base_url
    from engine_adapter.remote.router_metrics import default_metrics_url

    if router_metrics is not None:  # HOST:PORT or a URL; the path defaults to /metrics
        router_metrics = normalize_base_url(router_metrics, what="--router-metrics")
        if not urllib.parse.urlsplit(router_metrics).path:
            router_metrics += "/metrics"
    workers, routers = expand(urls, timeout_s=timeout_s)
    if routers and (kv_events or plugin_urls):
        raise InputError("--kv-events and --plugin-url go per worker --url; behind a router "
                         "each worker's come from its /server_info")
    if router_metrics is not None and not routers:
        raise InputError("--router-metrics applies to a router's --url (one that answers "
                         "GET /workers); none of the --url given is one")
    if routers and router_metrics is None:
        router_metrics = default_metrics_url(routers[0])
    return AttachPlan(given=tuple(urls), workers=tuple(workers), routers=tuple(routers),
                      router_metrics=router_metrics, kv_events=tuple(kv_events),
                      plugin_urls=tuple(plugin_urls))

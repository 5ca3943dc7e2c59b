"""sglang-router 0.3.2's own Prometheus metrics, read into a RouterView (fleet_view.py).

The router serves them on a port of their own (`--prometheus-host` / `--prometheus-port`,
0.3.2 defaults 0.0.0.0:29000), not on its routing port, and no routing endpoint names that
port (`/get_server_info` answers `{"router_manager", "routers_count", "workers_count"}`).
So the address is given (`--router-metrics URL`, the sandbox's ready line `router.
metrics_url`) or defaults to DEFAULT_PORT on the router's host; either way the reading is
kept only if it names this fleet's workers, so another router's endpoint is not taken for
this one. What 0.3.2 exports per worker (`worker` label = the worker URL), and kept here:

    smg_worker_cb_outcomes_total{worker, outcome=success|failure}  requests it forwarded
    smg_worker_requests_active{worker}      in flight now (cache_aware's and
                                            power_of_two's load)
    smg_worker_health{worker}               1 healthy, 0 not
    smg_worker_cb_state{worker}             circuit breaker 0 closed, 1 open, 2 half_open
    smg_router_requests_total{endpoint,...} requests routed, every endpoint

(0.3.2's `smg_worker_selection_total` has no worker label: one count per policy.)
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from engine_adapter.fleet_view import RouterView, RouterWorkerView
from engine_adapter.remote.http_fetch import Unreachable, http_get
from engine_adapter.remote.metrics_scrape import MetricsReading, parse_metrics

DEFAULT_PORT = 29000  # sglang_router/router_args.py 0.3.2, --prometheus-port
CIRCUIT_STATES = {0: "closed", 1: "open", 2: "half_open"}  # smg_worker_cb_state


def default_metrics_url(router_url: str) -> str:
    """0.3.2's default metrics address on the router's host."""
    host = urllib.parse.urlsplit(router_url).hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{DEFAULT_PORT}/metrics"


def read_router_metrics(metrics_url: str, workers: Sequence[str], *,
                        timeout_s: float) -> RouterView:
    """The router's figures for `workers` (URLs as its /workers lists them). Never raises:
    an endpoint that does not answer, answers non-200, or names none of `workers` gives a
    view with `reachable` False (or True with `error`) and no figures."""
    try:
        status, body = http_get(metrics_url, timeout_s=timeout_s)
    except Unreachable as err:
        return RouterView(metrics_url=metrics_url, reachable=False, error=str(err))
    if status != 200:
        return RouterView(metrics_url=metrics_url, reachable=False,
                          error=f"{metrics_url} answered HTTP {status}")
    reading = parse_metrics(body.decode("utf-8", errors="replace"), prefix="smg_")
    listed = {dict(s.labels).get("worker") for s in reading.samples} - {None}
    if not listed & {w.rstrip("/") for w in workers}:
        return RouterView(metrics_url=metrics_url, reachable=True,
                          error=f"{metrics_url} counts none of this fleet's workers "
                                "(another router's metrics?)")
    return RouterView(metrics_url=metrics_url, reachable=True,
                      requests=reading.count("smg_router_requests_total"),
                      workers=tuple(_worker(reading, w.rstrip("/")) for w in workers))


def _worker(reading: MetricsReading, url: str) -> RouterWorkerView:
    where = {"worker": url}
    health = reading.count("smg_worker_health", where=where)
    state = reading.count("smg_worker_cb_state", where=where)
    return RouterWorkerView(
        url=url,
        requests=reading.count("smg_worker_cb_outcomes_total", where=where),
        failures=_failures(reading, where),
        in_flight=reading.count("smg_worker_requests_active", where=where),
        healthy=None if health is None else health == 1,
        circuit=None if state is None else CIRCUIT_STATES.get(state, str(state)),
    )


def _failures(reading: MetricsReading, where: dict[str, str]) -> int | None:
    if reading.count("smg_worker_cb_outcomes_total", where=where) is None:
        return None  # the router has not counted this worker at all
    # an outcome series appears with the first such outcome: none yet is 0 failures
    return reading.count("smg_worker_cb_outcomes_total",
                         where={**where, "outcome": "failure"}) or 0

"""The fleet live: each replica beside the sum (fleet_aggregate.replica_view), the router's own
metrics (router_metrics.py), the rows inspect and monitor print (kvctl/tui/fleet_rows.py),
the exported families (telemetry/fleet_metrics.py) and the attach plan's bad input.

The router exposition below is what sglang-router 0.3.2 served in front of two sandbox
workers (docs/fleet.md "The fleet live"), its TYPE lines kept, plus one failure outcome for
the second worker written the way 0.3.2 writes its success outcomes.
"""

from __future__ import annotations

import dataclasses
import http.server

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from engine_adapter.base.errors import InputError
from engine_adapter.remote.attach import plan_attach
from engine_adapter.remote.fleet_aggregate import aggregate
from engine_adapter.remote.metrics_scrape import parse_metrics
from engine_adapter.remote.router_metrics import default_metrics_url, read_router_metrics
from engine_adapter.remote.server_info import parse_server_info
from engine_adapter.remote.snapshot_build import build_snapshot
from kvctl.tui.fleet_rows import fleet_rows, router_state
from support.http_stub import serving
from support.server_metrics_text import SMALL_SERVER_METRICS
from telemetry.collector import SnapshotCollector

pytestmark = pytest.mark.unit

W0, W1, DEAD = "http://127.0.0.1:32137", "http://127.0.0.1:27537", "http://127.0.0.1:9"
REQUEST_LABELS = ('router_type="http",backend_type="regular",connection_mode="http",'
                  'model="default",endpoint="generate",streaming="false"')
ROUTER_TEXT = f"""# TYPE smg_router_requests_total counter
smg_router_requests_total{{{REQUEST_LABELS}}} 17
# TYPE smg_worker_cb_outcomes_total counter
smg_worker_cb_outcomes_total{{worker="{W1}",outcome="success"}} 6
smg_worker_cb_outcomes_total{{worker="{W1}",outcome="failure"}} 1
smg_worker_cb_outcomes_total{{worker="{W0}",outcome="success"}} 10
# TYPE smg_worker_selection_total counter
smg_worker_selection_total{{worker_type="regular",connection_mode="http",model="default",\
policy="cache_aware"}} 17
# TYPE smg_worker_requests_active gauge
smg_worker_requests_active{{worker="{W0}"}} 2
smg_worker_requests_active{{worker="{W1}"}} 0
# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{{worker="{W0}"}} 0
smg_worker_cb_state{{worker="{W1}"}} 2
# TYPE smg_worker_health gauge
smg_worker_health{{worker="{W0}"}} 1
smg_worker_health{{worker="{W1}"}} 0
"""
WORKER_METRICS = SMALL_SERVER_METRICS
INFO = parse_server_info({"page_size": 16, "served_model_name": "m", "version": "0.5.23",
                          "radix_eviction_policy": "lru", "max_total_num_tokens": 1024},
                         base_url="http://h:1")


@pytest.fixture(scope="module")
def router_metrics_url():
    """ROUTER_TEXT served over real HTTP on a loopback port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = ROUTER_TEXT.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serving(Handler) as url:
        yield f"{url}/metrics"


def worker(seq: int = 1):
    return build_snapshot(seq=seq, attached_s=2.0, wall_time_s=100.0, info=INFO,
                          metrics=parse_metrics(WORKER_METRICS), stream=None, shape=None)


def fleet(router=None):
    down = dataclasses.replace(worker(3), connected=False)  # placeholder numbers: never shown
    return aggregate([(W0, worker(1)), (W1, worker(2)), (DEAD, down)], seq=9,
                     wall_time_s=5.0, loads=[2, 0, None], router=router)


def test_router_metrics_per_worker(router_metrics_url):
    """Per worker: requests = success + failure outcomes, in flight, health, breaker state
    (2 = half_open); the routed total; workers in the order asked, one it never counted
    has no figures."""
    view = read_router_metrics(router_metrics_url, [W0, W1, DEAD], timeout_s=5)
    assert (view.reachable, view.error, view.requests) == (True, None, 17)
    w0, w1, dead = view.workers
    assert (w0.requests, w0.failures, w0.in_flight, w0.healthy, w0.circuit) == (
        10, 0, 2, True, "closed")
    assert (w1.requests, w1.failures, w1.in_flight, w1.healthy, w1.circuit) == (
        7, 1, 0, False, "half_open")
    assert (dead.requests, dead.failures, dead.in_flight, dead.healthy, dead.circuit) == (
        None, None, None, None, None)


def test_router_metrics_of_another_fleet_are_not_taken(router_metrics_url):
    """An endpoint that counts none of this fleet's workers gives no figures, and says so."""
    view = read_router_metrics(router_metrics_url, ["http://10.0.0.1:1"], timeout_s=5)
    assert view.reachable and view.requests is None and view.workers == ()
    assert "none of this fleet's workers" in view.error


def test_unreachable_router_metrics_read_unknown():
    """Nothing listens: reachable False, no figures; the row cells read unknown, and the
    exporter says kvctl_router_up 0 with no kvctl_router_* figure (never 0)."""
    view = read_router_metrics("http://127.0.0.1:9/metrics", [W0], timeout_s=2)
    assert (view.reachable, view.requests, view.workers) == (False, None, ())
    snapshot = fleet(view)
    assert {row[-3:] for row in fleet_rows(snapshot)[:-1]} == {("unknown",) * 3}
    assert "unknown" in router_state(snapshot.router)
    text = _scrape(snapshot)
    assert "kvctl_router_up 0.0" in text
    assert [line for line in text.splitlines()
            if line.startswith("kvctl_router_") and not line.startswith("kvctl_router_up")] == []


def test_a_down_replica_reads_down_and_the_sum_is_partial(router_metrics_url):
    """Each replica beside the sum: the two up ones with their own pools and hit rates, the
    down one DOWN with every figure unknown (its snapshot's placeholder 0s never shown);
    the sum of the two pools, labelled partial; the router's count beside each."""
    snapshot = fleet(read_router_metrics(router_metrics_url, [W0, W1, DEAD], timeout_s=5))
    up, _, down = snapshot.replicas
    assert (up.ledger.pool_tokens, up.hit_rate, up.load) == (1024, 0.75, 2)
    assert (down.connected, down.ledger, down.hit_rate, down.prompt_tokens) == (
        False, None, None, None)
    rows = fleet_rows(snapshot)
    assert rows[0][:3] == (W0, "up", "1,024") and rows[0][-3:] == ("10", "2", "closed")
    assert rows[2][1] == "DOWN" and set(rows[2][2:]) == {"unknown"}
    assert rows[3][0] == "all (partial: 1 of 3 down)" and rows[3][2] == "2,048"
    assert rows[3][-3] == "17"


def test_exported_fleet_families(router_metrics_url):
    """The scrape: replicas up 2 / down 1, replica_up 0 for the down one and none of its
    figures, per-replica pools, the router's per-replica requests by outcome."""
    text = _scrape(fleet(read_router_metrics(router_metrics_url, [W0, W1, DEAD], timeout_s=5)))
    assert 'kvctl_fleet_replicas{state="down"} 1.0' in text
    assert f'kvctl_replica_up{{replica="{DEAD}"}} 0.0' in text
    assert [line for line in text.splitlines() if DEAD in line and "replica_up" not in line] \
        == []
    assert f'kvctl_replica_pool_tokens{{replica="{W0}",state="capacity"}} 1024.0' in text
    assert f'kvctl_router_worker_requests_total{{outcome="failure",replica="{W1}"}} 1.0' in text
    assert f'kvctl_router_worker_requests_total{{outcome="success",replica="{W1}"}} 6.0' in text
    assert f'kvctl_router_worker_circuit_state{{circuit="half_open",replica="{W1}"}} 1.0' in text


def test_every_replica_down_still_says_which():
    """All down: kvctl_up 0, the fleet's unlabelled figures absent, kvctl_replica_up 0 each."""
    downs = [(u, dataclasses.replace(worker(), connected=False)) for u in (W0, W1)]
    text = _scrape(aggregate(downs, seq=1, wall_time_s=1.0))
    assert "kvctl_up 0.0" in text and "kvctl_pool_tokens" not in text
    assert f'kvctl_replica_up{{replica="{W0}"}} 0.0' in text
    assert 'kvctl_fleet_replicas{state="down"} 2.0' in text


def test_attach_refuses_router_metrics_without_a_router():
    """--router-metrics with a plain (here: dead) server URL is one line, before any read."""
    with pytest.raises(InputError, match="--router-metrics applies to a router's --url"):
        plan_attach([DEAD], router_metrics="127.0.0.1:29001", timeout_s=1)


def test_default_router_metrics_address():
    """0.3.2's default --prometheus-port on the router's host; IPv6 bracketed."""
    assert default_metrics_url("http://10.1.2.3:8000") == "http://10.1.2.3:29000/metrics"
    assert default_metrics_url("http://[::1]:8000") == "http://[::1]:29000/metrics"


def _scrape(snapshot) -> str:
    class Source:
        def snapshot(self):
            return snapshot

    registry = CollectorRegistry()
    SnapshotCollector(Source(), registry=registry)
    return generate_latest(registry).decode()

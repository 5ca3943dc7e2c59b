"""The /metrics HTTP server on real loopback sockets."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from kvctl.errors import InputError
from telemetry.exporter import DEFAULT_HOST, DEFAULT_PORT, serve
from support.telemetry_fixtures import FixedSnapshotSource, seed_snapshot

pytestmark = pytest.mark.unit


def _get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


@pytest.fixture
def server():
    with serve(FixedSnapshotSource([seed_snapshot()]), port=0) as running:
        yield running


def test_defaults_are_loopback_and_port_9464():
    """serve() binds 127.0.0.1:9464 unless told otherwise."""
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 9464)


def test_binds_loopback_by_default(server):
    """With only a port given, the server listens on 127.0.0.1."""
    assert server.host == "127.0.0.1"
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"


def test_metrics_served_in_prometheus_text_format(server):
    """GET /metrics answers 200, text format 0.0.4, with the snapshot's samples."""
    status, content_type, body = _get(server.url)
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "kvctl_up 1.0" in body
    assert 'kvctl_pool_tokens{state="free"} 3.0' in body


def test_metrics_negotiate_openmetrics(server):
    """An OpenMetrics Accept header (what Prometheus sends) gets OpenMetrics with # EOF."""
    status, content_type, body = _get(server.url, "application/openmetrics-text; version=1.0.0")
    assert status == 200
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")
    assert 'kvctl_funnel_requests_total{stage="requests"} 12.0' in body
    assert 'kvctl_engine_info{engine="embedded"' in body


def test_root_points_to_metrics_and_other_paths_are_404(server):
    """/ answers a pointer to /metrics; an unknown path answers 404."""
    root = _get(f"http://127.0.0.1:{server.port}/")
    missing = _get(f"http://127.0.0.1:{server.port}/favicon.ico")
    assert root[0] == 200 and "/metrics" in root[2]
    assert missing[0] == 404


def test_close_frees_the_port_and_is_idempotent():
    """After close() (twice) the same port can be bound again."""
    running = serve(FixedSnapshotSource([seed_snapshot()]), port=0)
    port = running.port
    running.close()
    running.close()
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


def test_port_in_use_is_an_input_error(server):
    """Binding a port that is taken raises InputError naming the address."""
    with pytest.raises(InputError, match=rf"cannot listen on 127.0.0.1:{server.port}: "
                                         r"address already in use"):
        serve(FixedSnapshotSource([seed_snapshot()]), port=server.port)


def test_port_out_of_range_is_an_input_error():
    """A port above 65535 is rejected before anything binds."""
    with pytest.raises(InputError, match="port 70000 is out of range"):
        serve(FixedSnapshotSource([seed_snapshot()]), port=70000)


def test_process_metrics_sit_beside_kvctl_metrics(server):
    """The exporter also serves the process collector (memory, CPU of the exporter)."""
    _, _, body = _get(server.url)
    assert "process_resident_memory_bytes" in body

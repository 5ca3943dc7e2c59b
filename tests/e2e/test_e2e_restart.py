"""A long-running `kvctl exporter --url` survives the real server's restart: it reports the
server disconnected while it is down (not a stale healthy reading), then reattaches to the
new process on the same ports, KV-event mirror included. Runs last in tests/e2e (file order):
it leaves a freshly started server."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.kvctl_cli import shared_prefix_prompts
from e2e.prometheus_proc import wait_for
from e2e.sglang_server import PAGE
from support.telemetry_fixtures import ExporterProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def scrape(url: str) -> dict[str, float]:
    body = urllib.request.urlopen(url, timeout=30).read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples
            if not s.labels}


def test_exporter_survives_a_server_restart(server):
    """connected 1 -> 0 while stopped -> 1 after the restart; the mirror then follows the
    new server's requests (4 + 2 x 2 pages = 32 tokens); the exporter exits 0."""
    with ExporterProcess("--url", server.url, "--interval", "0.5") as exporter:
        wait_for(lambda: scrape(exporter.url).get("kvctl_connected") == 1.0, 60, "connected")
        server.stop()
        wait_for(lambda: scrape(exporter.url).get("kvctl_connected") == 0.0, 60,
                 "connected 0 while the server is down")  # the exporter itself keeps serving
        server.start()
        wait_for(lambda: scrape(exporter.url).get("kvctl_connected") == 1.0, 120, "reconnected")

        for ids in shared_prefix_prompts(4 * PAGE, 2 * PAGE, 2, base=200):
            server.generate(ids)
        wait_for(lambda: scrape(exporter.url).get("kvctl_tree_cached_tokens") == 32.0, 60,
                 "the mirror of the restarted server")
    assert exporter.returncode == 0, exporter.stderr

"""Load: 200 concurrent scrapes of `kvctl exporter` (running a shipped scenario on the
embedded engine) on loopback all succeed, and the exporter then stops cleanly on SIGTERM."""

from __future__ import annotations

import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.telemetry_fixtures import ExporterProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]

SCRAPES = 200
SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "coding-agents.yaml"


def _scrape(url: str, barrier: threading.Barrier) -> tuple[int, float | None]:
    barrier.wait(timeout=60)  # release all scrapes together
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read().decode()
    up = next((s.value for f in text_string_to_metric_families(body) if f.name == "kvctl_up"
               for s in f.samples), None)
    return response.status, up


def test_200_concurrent_scrapes_all_succeed():
    """200 scrapes released at once while the engine runs: every one answers 200 with
    kvctl_up 1, and the exporter exits 0 on SIGTERM afterwards."""
    barrier = threading.Barrier(SCRAPES)
    with ExporterProcess("--scenario", str(SCENARIO), "--interval", "0.25") as exporter:
        with ThreadPoolExecutor(max_workers=SCRAPES) as pool:
            results = list(pool.map(lambda _: _scrape(exporter.url, barrier), range(SCRAPES)))
    assert results == [(200, 1.0)] * SCRAPES
    assert exporter.returncode == 0, exporter.stderr

"""`kvctl exporter --trace`: a Mooncake trace replayed on the embedded engine is served on
loopback, and the command exits 0 on SIGTERM."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.telemetry_fixtures import ExporterProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRACE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"


def _samples(url: str) -> dict[str, float]:
    body = urllib.request.urlopen(url, timeout=30).read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(body) for s in f.samples
            if not s.labels}


def test_trace_replay_is_served_on_loopback_and_advances():
    """The exporter announces a loopback address, its virtual clock moves between scrapes,
    and the trace's requests are admitted."""
    with ExporterProcess("--trace", str(TRACE), "--pace", "2", "--interval", "0.25") as exporter:
        first = _samples(exporter.url)
        time.sleep(3)
        second = _samples(exporter.url)
    assert exporter.announced["host"] == "127.0.0.1" and exporter.announced["kind"] == "trace"
    assert first["kvctl_up"] == 1.0 and second["kvctl_up"] == 1.0
    assert second["kvctl_virtual_time_seconds"] > first["kvctl_virtual_time_seconds"]
    assert second["kvctl_requests_submitted_total"] > 0
    assert second["kvctl_pool_capacity_tokens"] == 262_144.0
    assert exporter.returncode == 0, exporter.stderr

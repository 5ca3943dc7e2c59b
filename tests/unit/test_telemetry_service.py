"""The exporter run loop: serves while running, pumps receipts into spans, stops cleanly."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine_adapter.receipts import Receipt
from telemetry.otel import ReceiptSpans
from telemetry.service import run_exporter
from support.telemetry_fixtures import FixedSnapshotSource, seed_snapshot

pytestmark = pytest.mark.unit

RECEIPTS = [Receipt(kind="match", start_s=0.0, end_s=0.0, tokens=64, outcome="hit"),
            Receipt(kind="eviction", start_s=0.1, end_s=0.1, tokens=32)]


def test_serves_until_stopped_and_turns_receipts_into_spans():
    """While running /metrics answers; after stop the spans of every receipt are exported."""
    source = FixedSnapshotSource([seed_snapshot()], RECEIPTS)
    exporter = InMemorySpanExporter()
    stop = threading.Event()
    bodies: list[str] = []

    def on_ready(server) -> None:
        bodies.append(urllib.request.urlopen(server.url, timeout=10).read().decode())
        stop.set()

    run = run_exporter(source, host="127.0.0.1", port=0, interval_s=0.05,
                       spans=ReceiptSpans(exporter), on_ready=on_ready, stop=stop)
    assert "kvctl_up 1.0" in bodies[0]
    assert (run.receipts, run.spans) == (2, 2)
    assert [s.name for s in exporter.get_finished_spans()] == ["kvctl.match", "kvctl.eviction"]


def test_duration_ends_the_run_and_frees_the_port():
    """With duration_s the loop returns on its own; the port is closed afterwards."""
    source = FixedSnapshotSource([seed_snapshot()], RECEIPTS)
    urls: list[str] = []
    run = run_exporter(source, host="127.0.0.1", port=0, interval_s=0.02, duration_s=0.1,
                       on_ready=lambda server: urls.append(server.url))
    assert run.url == urls[0]
    assert run.receipts == 2 and run.spans == 0  # drained even with tracing off
    with pytest.raises(OSError):
        urllib.request.urlopen(run.url, timeout=2)
    assert source.closed is False  # the caller owns the source

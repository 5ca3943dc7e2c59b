"""The exporter's run loop: serve `/metrics`, turn receipts into spans, stop cleanly.

`run_exporter()` owns nothing it did not open: it serves the given source, pumps the
source's receipts into spans every `interval_s` and once more on the way out (when a span
recorder is given; otherwise receipts are drained and dropped so they cannot pile up), and
returns when `duration_s` elapses, on Ctrl-C, on SIGTERM or when `stop` is set. The caller
closes the source.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from engine_adapter.protocol import SnapshotSource
from telemetry.exporter import MetricsServer, serve
from telemetry.hygiene import NamespaceLabeler
from telemetry.otel import ReceiptSpans


@dataclass(frozen=True, kw_only=True)
class ExporterRun:
    """What a finished run did."""

    url: str
    wall_seconds: float
    receipts: int
    spans: int


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _pump(source: SnapshotSource, spans: ReceiptSpans | None) -> int:
    taken = source.take_receipts()
    if spans is not None:
        spans.record(taken)
    return len(taken)


def run_exporter(source: SnapshotSource, *, host: str, port: int, interval_s: float,
                 duration_s: float | None = None, labeler: NamespaceLabeler | None = None,
                 spans: ReceiptSpans | None = None, max_age_s: float = 0.0,
                 on_ready: Callable[[MetricsServer], None] | None = None,
                 stop: threading.Event | None = None) -> ExporterRun:
    """Serve until `duration_s`, Ctrl-C, SIGTERM or `stop` is set; returns a summary.

    Raises InputError (from `serve`) when the address cannot be bound. Closes the server and
    the span recorder (flushing spans) on the way out; does not close the source.
    """
    stop = stop if stop is not None else threading.Event()
    server = serve(source, host, port, labeler=labeler, max_age_s=max_age_s)
    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        previous_handler = signal.signal(signal.SIGTERM, _raise_stop)
    started = time.monotonic()
    receipts = 0
    try:
        if on_ready is not None:
            on_ready(server)
        while not stop.is_set():
            remaining = None if duration_s is None else duration_s - (time.monotonic() - started)
            if remaining is not None and remaining <= 0:
                break
            stop.wait(interval_s if remaining is None else min(interval_s, remaining))
            receipts += _pump(source, spans)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
        server.close()
        receipts += _pump(source, spans)  # the last receipts are not lost on the way out
        if spans is not None:
            spans.close()
    return ExporterRun(url=server.url, wall_seconds=time.monotonic() - started,
                       receipts=receipts, spans=spans.spans_recorded if spans else 0)

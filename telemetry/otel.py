"""OpenTelemetry spans for engine receipts (match, allocation, eviction, offload, reload, ...).

One span per receipt, named `kvctl.<kind>`, with low-cardinality attributes only: the kind,
the outcome (`ok`, `hit`, `miss`, `rejected`, `failed`), the rejection reason from the funnel's
fixed set, token and byte counts, the namespace label (hashed unless allow-listed, seed 000
0x0CE) and the receipt's virtual-clock times. No request ids, token ids or prompt text.

Timing: receipts carry virtual-clock seconds, which can run faster than the wall clock. Each
batch handed to `record()` is anchored so its latest `end_s` lands at the anchor (now, by
default); durations and the order inside a batch are the modeled ones.

Export: `from_environment()` returns a recorder that ships spans over OTLP/HTTP only when the
standard variables name an endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and None otherwise: tracing is off by default. The
exporter itself reads the other OTEL_EXPORTER_OTLP_* settings (headers, timeout, compression).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable, Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Status, StatusCode

from engine_adapter.funnel import REJECTION_REASONS
from engine_adapter.protocol import SnapshotSource
from engine_adapter.receipts import RECEIPT_KINDS, Receipt
from engine_adapter.base.errors import InputError
from telemetry.hygiene import NamespaceLabeler

OUTCOMES = ("ok", "hit", "miss", "rejected", "failed")
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_NS_PER_S = 1_000_000_000


def otlp_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the standard OTEL_* variables ask for trace export over OTLP."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if "otlp" not in [name.strip() for name in exporters.split(",")]:
        return False
    return any(environ.get(name, "").strip() for name in _ENDPOINT_VARS)


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = next((environ[v].strip() for v in _PROTOCOL_VARS if environ.get(v)),
                    "http/protobuf")
    if protocol != "http/protobuf":
        raise InputError(
            f"OTLP protocol {protocol!r} is not supported by kvctl; set "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise InputError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but opentelemetry-exporter-otlp-proto-http "
            "is not installed"
        ) from None
    return OTLPSpanExporter()  # endpoint, headers, timeout, compression from OTEL_* vars


def _split_outcome(outcome: str) -> tuple[str, str | None]:
    head, _, reason = outcome.partition(":")
    head = head if head in OUTCOMES else "other"
    if head != "rejected":
        return head, None
    return head, reason if reason in REJECTION_REASONS else "other"


class ReceiptSpans:
    """Records receipts as spans on its own TracerProvider (the global one is untouched).

    span_exporter: where finished spans go (the SDK's InMemorySpanExporter in tests).
    batch: export through a BatchSpanProcessor (background thread) instead of synchronously.
    anchor_ns: wall-clock nanoseconds a batch's latest receipt end is placed at.
    """

    def __init__(self, span_exporter: SpanExporter, *, labeler: NamespaceLabeler | None = None,
                 resource_attributes: Mapping[str, str | int] | None = None,
                 batch: bool = False, anchor_ns: Callable[[], int] = time.time_ns) -> None:
        attributes = {"service.name": "kvctl-exporter", **(resource_attributes or {})}
        self._provider = TracerProvider(resource=Resource.create(attributes))
        processor = (BatchSpanProcessor(span_exporter) if batch
                     else SimpleSpanProcessor(span_exporter))
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("kvctl.telemetry")
        self._labeler = labeler if labeler is not None else NamespaceLabeler()
        self._anchor_ns = anchor_ns
        self.spans_recorded = 0
        self._closed = False

    def record(self, receipts: Iterable[Receipt]) -> int:
        """Emit one span per receipt; returns how many were emitted."""
        batch = list(receipts)
        if not batch:
            return 0
        batch_end_s = max(r.end_s for r in batch)
        anchor = self._anchor_ns()
        for receipt in batch:
            start_ns = anchor - round((batch_end_s - receipt.start_s) * _NS_PER_S)
            end_ns = anchor - round((batch_end_s - max(receipt.end_s, receipt.start_s)) * _NS_PER_S)
            kind = receipt.kind if receipt.kind in RECEIPT_KINDS else "other"
            outcome, reason = _split_outcome(receipt.outcome)
            attributes: dict[str, str | int | float] = {
                "kvctl.receipt.kind": kind,
                "kvctl.outcome": outcome,
                "kvctl.tokens": receipt.tokens,
                "kvctl.bytes": receipt.nbytes,
                "kvctl.namespace": self._labeler.label(receipt.namespace),
                "kvctl.virtual_start_s": receipt.start_s,
                "kvctl.virtual_duration_s": max(0.0, receipt.end_s - receipt.start_s),
            }
            if reason is not None:
                attributes["kvctl.rejection_reason"] = reason
            span = self._tracer.start_span(f"kvctl.{kind}", attributes=attributes,
                                           start_time=start_ns)
            if outcome == "failed":
                span.set_status(Status(StatusCode.ERROR, "allocation or transfer failed"))
            span.end(end_time=end_ns)
        self.spans_recorded += len(batch)
        return len(batch)

    def pump(self, source: SnapshotSource) -> int:
        """Drain `source`'s receipts into spans; returns how many."""
        return self.record(source.take_receipts())

    def close(self) -> None:
        """Flush and shut the provider down (pending batched spans are exported). Idempotent."""
        if not self._closed:
            self._closed = True
            self._provider.shutdown()


def from_environment(*, labeler: NamespaceLabeler | None = None,
                     resource_attributes: Mapping[str, str | int] | None = None,
                     environ: Mapping[str, str] = os.environ) -> ReceiptSpans | None:
    """A batching OTLP recorder when OTEL_* asks for one, else None (tracing off).

    Raises InputError for a protocol kvctl cannot speak or a missing exporter package.
    """
    if not otlp_enabled(environ):
        return None
    return ReceiptSpans(_otlp_exporter(environ), labeler=labeler,
                        resource_attributes=resource_attributes, batch=True)

"""Receipts as OpenTelemetry spans: the SDK's in-memory exporter, and real OTLP/HTTP."""

from __future__ import annotations

import http.server
import threading

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from engine_adapter.receipts import Receipt
from kvctl.errors import InputError
from telemetry.hygiene import NamespaceLabeler
from telemetry.otel import ReceiptSpans, from_environment, otlp_enabled

pytestmark = pytest.mark.unit

ANCHOR_NS = 1_700_000_000_000_000_000


def _record(*receipts: Receipt, labeler: NamespaceLabeler | None = None):
    exporter = InMemorySpanExporter()
    spans = ReceiptSpans(exporter, labeler=labeler or NamespaceLabeler(salt=b"t"),
                         resource_attributes={"kvctl.engine": "embedded"},
                         anchor_ns=lambda: ANCHOR_NS)
    count = spans.record(receipts)
    spans.close()
    return count, exporter.get_finished_spans()


def test_one_span_per_receipt_named_by_kind():
    """Each receipt becomes a span kvctl.<kind>, in order."""
    count, spans = _record(
        Receipt(kind="match", start_s=1.0, end_s=1.0, tokens=512, outcome="hit"),
        Receipt(kind="allocation", start_s=1.0, end_s=1.0, tokens=64),
        Receipt(kind="offload", start_s=1.5, end_s=2.0, tokens=4096, nbytes=536_870_912),
    )
    assert count == 3
    assert [s.name for s in spans] == ["kvctl.match", "kvctl.allocation", "kvctl.offload"]


def test_span_times_keep_modeled_durations_and_end_at_the_anchor():
    """The batch's latest end lands on the anchor; a 0.5 s modeled transfer lasts 0.5 s."""
    _, spans = _record(
        Receipt(kind="match", start_s=1.0, end_s=1.0, tokens=16),
        Receipt(kind="reload", start_s=1.5, end_s=2.0, tokens=16, nbytes=2_097_152),
    )
    match, reload = spans
    assert reload.end_time == ANCHOR_NS
    assert reload.end_time - reload.start_time == 500_000_000
    assert match.start_time == match.end_time == ANCHOR_NS - 1_000_000_000


def test_attributes_are_the_low_cardinality_set():
    """Kind, outcome, tokens, bytes, namespace label and virtual times; no request id."""
    labeler = NamespaceLabeler(salt=b"t")
    _, (span,) = _record(Receipt(kind="offload", start_s=3.0, end_s=3.25, tokens=4096,
                                 nbytes=536_870_912, namespace="acme", request="req-17"),
                         labeler=labeler)
    assert dict(span.attributes) == {
        "kvctl.receipt.kind": "offload",
        "kvctl.outcome": "ok",
        "kvctl.tokens": 4096,
        "kvctl.bytes": 536_870_912,
        "kvctl.namespace": labeler.label("acme"),
        "kvctl.virtual_start_s": 3.0,
        "kvctl.virtual_duration_s": 0.25,
    }
    assert span.resource.attributes["service.name"] == "kvctl-exporter"
    assert span.resource.attributes["kvctl.engine"] == "embedded"


def test_rejected_outcome_splits_into_outcome_and_funnel_reason():
    """'rejected:<reason>' -> outcome rejected plus the funnel reason; unknown reason -> other."""
    _, (known, unknown) = _record(
        Receipt(kind="match", start_s=0.0, end_s=0.0, tokens=0,
                outcome="rejected:stale_generation"),
        Receipt(kind="match", start_s=0.0, end_s=0.0, tokens=0, outcome="rejected:prompt says hi"),
    )
    assert (known.attributes["kvctl.outcome"], known.attributes["kvctl.rejection_reason"]) == (
        "rejected", "stale_generation")
    assert unknown.attributes["kvctl.rejection_reason"] == "other"


def test_failed_receipt_marks_the_span_as_error():
    """outcome 'failed' sets the span status to ERROR; others stay UNSET."""
    _, (failed, ok) = _record(
        Receipt(kind="allocation", start_s=0.0, end_s=0.0, tokens=64, outcome="failed"),
        Receipt(kind="allocation", start_s=0.0, end_s=0.0, tokens=64),
    )
    assert failed.status.status_code is StatusCode.ERROR
    assert ok.status.status_code is StatusCode.UNSET


def test_empty_batch_records_nothing():
    """No receipts, no spans."""
    count, spans = _record()
    assert (count, spans) == (0, ())


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_otlp_is_on_only_when_an_endpoint_is_configured(environ, enabled):
    """Tracing is off by default and follows the standard OTEL_* variables."""
    assert otlp_enabled(environ) is enabled


def test_from_environment_is_none_without_otel_variables():
    """No endpoint: no recorder, nothing exported."""
    assert from_environment(environ={}) is None


def test_grpc_protocol_is_an_input_error():
    """kvctl speaks OTLP over HTTP/protobuf only; asking for gRPC is a one-line input error."""
    with pytest.raises(InputError, match="OTLP protocol 'grpc' is not supported"):
        from_environment(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
                                  "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


class _OtlpReceiver(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_spans_reach_an_otlp_http_endpoint(monkeypatch):
    """With OTEL_EXPORTER_OTLP_ENDPOINT set, spans are POSTed as OTLP protobuf to /v1/traces."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    _OtlpReceiver.received = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtlpReceiver)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{httpd.server_port}")
        recorder = from_environment(labeler=NamespaceLabeler(salt=b"t"))
        assert recorder is not None
        recorder.record([Receipt(kind="eviction", start_s=0.0, end_s=0.0, tokens=256)])
        recorder.close()  # flushes the batch processor
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [(path, ctype) for path, ctype, _ in _OtlpReceiver.received] == [
        ("/v1/traces", "application/x-protobuf")]
    request = ExportTraceServiceRequest()
    request.ParseFromString(_OtlpReceiver.received[0][2])
    names = [span.name for rs in request.resource_spans for ss in rs.scope_spans
             for span in ss.spans]
    assert names == ["kvctl.eviction"]

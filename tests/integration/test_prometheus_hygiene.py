"""Hygiene on the real engine (seed 000 0x0CE): neither /metrics nor receipt spans may carry
a known marker, token ids, tenant names or unsalted cache keys.

Two workloads: requests whose prompts embed a marker token-id sequence, submitted to
`EmbeddedEngine` directly (so the prompts' SGLang page keys are known exactly); and a
scenario whose tenants and agents are named with a marker, run by `kvctl exporter` with its
spans shipped over OTLP/HTTP to a loopback receiver.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from telemetry.exporter import serve
from telemetry.hygiene import NamespaceLabeler, check_exposition, check_spans
from telemetry.otel import ReceiptSpans
from support.telemetry_fixtures import ExporterProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARKER_TEXT = "ZEBRA-MARKER"
TENANTS = (f"tenant-{MARKER_TEXT}-acme", f"tenant-{MARKER_TEXT}-globex")
MARKER_IDS = np.arange(777_001, 777_001 + 64)
PAGE = 16


def _prompt(index: int) -> np.ndarray:
    system = np.arange(1, 257)  # shared system prompt: prefix hits across requests
    tail = np.arange(100_000 + 200 * index, 100_000 + 200 * index + 180)
    return np.concatenate([system, MARKER_IDS, tail])


def _unsalted_keys(prompts: list[np.ndarray]) -> set[str]:
    """SGLang's own page keys for these prompts (no namespace seed), hex and int64 forms."""
    from sglang.srt.mem_cache.utils import get_hash_str, hash_str_to_int64

    keys: set[str] = set()
    for prompt in prompts:
        usable = len(prompt) // PAGE * PAGE
        for digest in get_hash_str([int(t) for t in prompt[:usable]], None, page_size=PAGE):
            keys |= {digest, digest[:16], str(hash_str_to_int64(digest))}
    return keys


@pytest.fixture(scope="module")
def run():
    """The engine mid-run (requests in flight) and after it, with every receipt it emitted."""
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    engine = EmbeddedEngine(EngineConfig(pool_tokens=2_048, page_size=PAGE, receipts=True,
                                         token_budget=1_024, tau_high=None))
    prompts = [_prompt(i) for i in range(12)]
    for index, prompt in enumerate(prompts):
        engine.submit(RequestSpec(rid=f"req-{index}", tokens=prompt, max_new_tokens=24,
                                  tenant=TENANTS[index % 2], arrival_s=0.001 * index))
    for _ in range(6):
        engine.step()
    mid = engine.snapshot()
    receipts = engine.take_receipts()
    engine.run_until_idle()
    receipts += engine.take_receipts()
    yield engine, mid, receipts, prompts
    engine.close()


def _forbidden(prompts: list[np.ndarray]) -> tuple[str, ...]:
    engine_labels = {"ns-" + hashlib.sha256(t.encode()).hexdigest()[:12] for t in TENANTS}
    marker_ids = {str(t) for t in MARKER_IDS}
    return tuple(sorted(_unsalted_keys(prompts) | marker_ids | set(TENANTS) | engine_labels))


def test_workload_exercised_namespaces_and_receipts(run):
    """Precondition: requests of both tenants were in flight and receipts were emitted."""
    _, mid, receipts, _ = run
    assert {r.namespace for r in mid.requests} and len(mid.requests) >= 2
    assert len(receipts) > 0


def test_metrics_carry_no_marker_ids_tenant_names_or_unsalted_keys(run):
    """Scrape /metrics over HTTP mid-run and after it: zero hygiene violations."""
    engine, _, _, prompts = run
    labeler = NamespaceLabeler(salt=b"hygiene-test")
    forbidden = _forbidden(prompts)
    with serve(engine, port=0, labeler=labeler) as server:
        body = urllib.request.urlopen(server.url, timeout=30).read().decode()
    assert "kvctl_up 1.0" in body
    assert check_exposition(body, markers=(MARKER_TEXT,), forbidden=forbidden) == []


def test_namespace_labels_in_metrics_are_salted_hashes(run):
    """Mid-run, the per-namespace family shows only ns-<hash> labels made with our salt."""
    from prometheus_client import CollectorRegistry, generate_latest

    from telemetry.collector import SnapshotCollector
    from support.telemetry_fixtures import FixedSnapshotSource

    _, mid, _, _ = run
    labeler = NamespaceLabeler(salt=b"hygiene-test")
    registry = CollectorRegistry()
    SnapshotCollector(FixedSnapshotSource([mid]), registry=registry, labeler=labeler)
    text = generate_latest(registry).decode()
    expected = {labeler.label(r.namespace) for r in mid.requests if r.state != "finished"}
    found = {line.split('"')[1] for line in text.splitlines()
             if line.startswith("kvctl_namespace_requests{")}
    assert found == expected and all(label.startswith("ns-") for label in found)


def test_spans_carry_no_marker_ids_tenant_names_or_unsalted_keys(run):
    """Every receipt becomes a span; no span name or attribute breaks a hygiene rule."""
    _, _, receipts, prompts = run
    exporter = InMemorySpanExporter()
    spans = ReceiptSpans(exporter, labeler=NamespaceLabeler(salt=b"hygiene-test"))
    spans.record(receipts)
    finished = exporter.get_finished_spans()
    spans.close()
    assert len(finished) == len(receipts)
    assert check_spans(finished, markers=(MARKER_TEXT,), forbidden=_forbidden(prompts)) == []


MARKER_SCENARIO = f"""
name: hygiene-{MARKER_TEXT}
seed: 11
duration_s: 20
prefix: {{system_tokens: 256, tool_schema_tokens: 128}}
engine: {{pool_tokens: 6144, page_size: 16, token_budget: 2048, host_capacity_tokens: 65536}}
tenants:
  - {{name: {TENANTS[0]}, reads: [public-{MARKER_TEXT}]}}
  - {{name: {TENANTS[1]}}}
agents:
  - name: chat-{MARKER_TEXT}
    tenant: {TENANTS[0]}
    sessions_per_s: 2
    turns: {{min: 2, max: 4}}
    context_tokens: {{mean: 500, sd: 100}}
    observation_tokens: {{mean: 80, sd: 20}}
    output_tokens: {{mean: 40, sd: 10}}
    tools:
      - {{name: tool-{MARKER_TEXT}, wait_s: {{dist: exponential, mean: 1}}, retention: offload}}
  - name: docs-{MARKER_TEXT}
    tenant: {TENANTS[0]}
    namespace: public-{MARKER_TEXT}
    sessions_per_s: 1
    context_tokens: {{mean: 700, sd: 100}}
    output_tokens: 20
  - name: snoop-{MARKER_TEXT}
    tenant: {TENANTS[1]}
    namespace: {TENANTS[0]}
    sessions_per_s: 0.5
    context_tokens: 300
    output_tokens: 10
"""


class _OtlpReceiver(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        type(self).bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _spans_from_otlp(bodies: list[bytes]) -> list[SimpleNamespace]:
    """Decoded OTLP export requests as objects check_spans reads (name, attributes, ...)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = SimpleNamespace(attributes={
                a.key: _value(a.value) for a in resource_spans.resource.attributes})
            for scope in resource_spans.scope_spans:
                spans += [SimpleNamespace(
                    name=span.name, resource=resource,
                    attributes={a.key: _value(a.value) for a in span.attributes},
                    events=[SimpleNamespace(name=e.name, attributes={
                        a.key: _value(a.value) for a in e.attributes}) for e in span.events],
                ) for span in scope.spans]
    return spans


def test_exporter_on_a_marker_scenario_leaks_nothing_to_metrics_or_otlp(tmp_path):
    """`kvctl exporter` on a scenario named with a marker, spans going to a real OTLP/HTTP
    receiver: /metrics and every exported span are free of the marker, tenant names and the
    engine's unsalted namespace hashes."""
    scenario = tmp_path / "marker.yaml"
    scenario.write_text(MARKER_SCENARIO)
    _OtlpReceiver.bodies = []
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtlpReceiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
           "OTEL_BSP_SCHEDULE_DELAY": "200", "KVCTL_NAMESPACE_SALT": "hygiene-e2e"}
    try:
        with ExporterProcess("--scenario", str(scenario), "--pace", "4", "--interval", "0.5",
                             env=env) as exporter:
            assert exporter.announced["otlp"] is True
            time.sleep(8)  # 32 virtual seconds: tool waits, offloads, evictions
            body = urllib.request.urlopen(exporter.url, timeout=30).read().decode()
    finally:
        receiver.shutdown()
        receiver.server_close()
    assert exporter.returncode == 0, exporter.stderr
    engine_labels = tuple("ns-" + hashlib.sha256(n.encode()).hexdigest()[:12]
                          for n in (*TENANTS, f"public-{MARKER_TEXT}"))
    forbidden = (*TENANTS, *engine_labels)
    assert "kvctl_namespace_requests{" in body and "kvctl_up 1.0" in body
    assert check_exposition(body, markers=(MARKER_TEXT,), forbidden=forbidden) == []
    spans = _spans_from_otlp(_OtlpReceiver.bodies)
    assert {s.name for s in spans} >= {"kvctl.offload", "kvctl.eviction"}
    assert check_spans(spans, markers=(MARKER_TEXT,), forbidden=forbidden) == []

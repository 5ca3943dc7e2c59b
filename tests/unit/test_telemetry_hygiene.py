"""Telemetry hygiene (seed 000 0x0CE): namespace labels and the checker the tests rely on."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from engine_adapter.receipts import Receipt
from telemetry.collector import SnapshotCollector
from telemetry.hygiene import NamespaceLabeler, check_exposition, check_spans
from telemetry.otel import ReceiptSpans
from support.telemetry_fixtures import FixedSnapshotSource, seed_snapshot

pytestmark = pytest.mark.unit

CLEAN = 'kvctl_requests{state="running"} 1.0\nkvctl_namespace_requests{namespace="default"} 1.0\n'


def test_allow_listed_namespace_passes_verbatim():
    """An allow-listed tenant keeps its name as the label."""
    assert NamespaceLabeler(allow=("public",), salt=b"s").label("public") == "public"


def test_other_namespaces_become_a_salted_hash():
    """A tenant outside the allow-list is ns-<first 12 hex of SHA-256(salt NUL name)>."""
    import hashlib

    expected = "ns-" + hashlib.sha256(b"s\0acme").hexdigest()[:12]
    assert NamespaceLabeler(salt=b"s").label("acme") == expected


def test_hash_depends_on_the_salt_and_is_stable_for_one_salt():
    """Same salt, same label (restarts with $KVCTL_NAMESPACE_SALT); another salt, another."""
    assert NamespaceLabeler(salt=b"a").label("acme") == NamespaceLabeler(salt=b"a").label("acme")
    assert NamespaceLabeler(salt=b"a").label("acme") != NamespaceLabeler(salt=b"b").label("acme")


def test_salt_comes_from_the_environment(monkeypatch):
    """$KVCTL_NAMESPACE_SALT seeds the hash when no salt is passed."""
    monkeypatch.setenv("KVCTL_NAMESPACE_SALT", "from-env")
    assert NamespaceLabeler().label("acme") == NamespaceLabeler(salt=b"from-env").label("acme")


def test_empty_namespace_is_default():
    """The empty namespace (no extra_key, no cache_salt) is labelled 'default'."""
    assert NamespaceLabeler(salt=b"s").label("") == "default"


def test_labels_past_the_cap_fold_into_other_but_allow_list_still_passes():
    """Cardinality stays bounded: the third hashed tenant with max_labels=2 is 'other'."""
    labeler = NamespaceLabeler(allow=("public",), salt=b"s", max_labels=2)
    labels = [labeler.label(name) for name in ("a", "b", "c", "public", "a")]
    assert labels[2:] == ["other", "public", labels[0]]
    assert labels[0].startswith("ns-") and labels[1].startswith("ns-")


def test_clean_exposition_has_no_violation():
    """The collector's output for the seed snapshot passes every rule."""
    registry = CollectorRegistry()
    SnapshotCollector(FixedSnapshotSource([seed_snapshot()]), registry=registry,
                      labeler=NamespaceLabeler(salt=b"s"))
    assert check_exposition(generate_latest(registry).decode(), markers=("ZEBRA-MARKER",)) == []


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ('kvctl_x{prompt="say ZEBRA-MARKER now"} 1\n', "marker"),
        ('kvctl_x{tokens="101, 2023, 3793, 2003, 1037, 3231, 1012, 102"} 1\n', "token_ids"),
        ('kvctl_x{key="9f86d081884c7d659a2feaa0c55ad015"} 1\n', "cache_key"),
        ('kvctl_x{block="-4611686018427387904"} 1\n', "cache_key"),
        ('kvctl_x{namespace="acme-corp"} 1\n', "raw_namespace"),
        ('kvctl_x{key="sekret-unsalted-key"} 1\n', "forbidden"),
    ],
)
def test_checker_flags_each_kind_of_leak(line, rule):
    """Marker text, token-id lists, hex and int64 cache keys, raw namespaces, forbidden keys."""
    found = check_exposition(CLEAN + line, markers=("ZEBRA-MARKER",),
                             forbidden=("sekret-unsalted-key",))
    assert [v.rule for v in found] == [rule]


def test_checker_accepts_allow_listed_namespaces():
    """A namespace label in the allow-list is not a violation."""
    assert check_exposition('kvctl_x{namespace="public"} 1\n', namespace_allow=("public",)) == []


def test_span_checker_flags_marker_and_raw_namespace_in_attributes():
    """check_spans scans span names and attributes like labels; kvctl's own spans pass."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    exporter = InMemorySpanExporter()
    spans = ReceiptSpans(exporter, labeler=NamespaceLabeler(salt=b"s"))
    spans.record([Receipt(kind="match", start_s=0.0, end_s=0.0, tokens=5, namespace="acme")])
    careless = TracerProvider()
    careless.add_span_processor(SimpleSpanProcessor(exporter))
    careless.get_tracer("careless").start_span(
        "leak", attributes={"prompt": "ZEBRA-MARKER", "kvctl.namespace": "acme"}).end()
    spans.close()  # last: closing shuts the shared exporter down for new spans
    found = check_spans(exporter.get_finished_spans(), markers=("ZEBRA-MARKER",))
    assert sorted((v.where, v.rule) for v in found) == [
        ("span leak attribute kvctl.namespace", "raw_namespace"),
        ("span leak attribute prompt", "marker"),
    ]

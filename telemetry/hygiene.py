"""Telemetry hygiene (seed 000 0x0CE): tenant labels, and a checker for what we publish.

"Metrics need stable low-cardinality identifiers, not raw prompts, token lists, or unsalted
concrete cache keys." Two pieces:

- `NamespaceLabeler` turns a tenant namespace into a label: allow-listed names pass as they
  are, anything else becomes `ns-<12 hex>` of a salted SHA-256, and past `max_labels`
  distinct labels the rest fold into `other` (cardinality stays bounded).
- `check_exposition` / `check_spans` scan a `/metrics` text or finished spans for prompt
  markers, token-id lists, cache-key-shaped values and raw namespaces, and return every
  `Violation`. Tests use them; they never mutate anything.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from prometheus_client.parser import text_string_to_metric_families

SALT_ENV = "KVCTL_NAMESPACE_SALT"
DEFAULT_LABEL = "default"  # the empty namespace (no extra_key, no cache_salt)
OVERFLOW_LABEL = "other"
HASHED_LABEL = re.compile(r"^ns-[0-9a-f]{12}$")
NAMESPACE_KEYS = ("namespace", "kvctl.namespace")

# Eight or more integers in a row: a token-id list however it was joined.
_TOKEN_LIST = re.compile(r"-?\d+(?:\s*[,;\s]\s*-?\d+){7,}")
# A SHA-256-ish hex digest (16+ hex digits), or an int64 block hash printed in decimal
# (SGLang's page hash is the first 8 bytes of a SHA-256 as a signed int64: ~19 digits).
_HEX_KEY = re.compile(r"(?<![0-9a-fA-F])[0-9a-fA-F]{16,}(?![0-9a-fA-F])")
_INT_KEY = re.compile(r"(?<![\d.])-?\d{16,}(?![\d.])")  # not a float's digits


class NamespaceLabeler:
    """Tenant namespace -> metric/span label. Thread-safe; remembers labels it has issued.

    salt: bytes mixed into the hash; default from $KVCTL_NAMESPACE_SALT (stable labels across
    restarts), else random per process (labels stable only for this process).
    """

    def __init__(self, *, allow: Iterable[str] = (), salt: bytes | None = None,
                 max_labels: int = 64) -> None:
        if salt is None:
            env = os.environ.get(SALT_ENV)
            salt = env.encode() if env else secrets.token_bytes(16)
        self._allow = frozenset(allow)
        self._salt = salt
        self._max_labels = max_labels
        self._issued: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def allow(self) -> frozenset[str]:
        return self._allow

    def label(self, namespace: str) -> str:
        """The label for `namespace` (same input, same label, for this labeler's life)."""
        if namespace == "":
            return DEFAULT_LABEL
        with self._lock:
            issued = self._issued.get(namespace)
            if issued is not None:
                return issued
            if namespace in self._allow:
                return namespace  # bounded by the allow-list itself
            if len(self._issued) >= self._max_labels:
                return OVERFLOW_LABEL
            digest = hashlib.sha256(self._salt + b"\0" + namespace.encode()).hexdigest()
            issued = self._issued[namespace] = f"ns-{digest[:12]}"
            return issued


@dataclass(frozen=True, kw_only=True)
class Violation:
    where: str  # e.g. "metric kvctl_x label namespace", "span kvctl.match attribute a"
    value: str
    rule: str  # marker | forbidden | token_ids | cache_key | raw_namespace


def _scan(where: str, value: str, markers: tuple[str, ...],
          forbidden: tuple[str, ...]) -> Iterator[Violation]:
    lowered = value.lower()
    for marker in markers:
        if marker.lower() in lowered:
            yield Violation(where=where, value=value, rule="marker")
    for key in forbidden:
        if key and key in value:
            yield Violation(where=where, value=value, rule="forbidden")
    if _TOKEN_LIST.search(value):
        yield Violation(where=where, value=value, rule="token_ids")
    if (_HEX_KEY.search(value) and not HASHED_LABEL.match(value)) or _INT_KEY.search(value):
        yield Violation(where=where, value=value, rule="cache_key")


def _namespace_ok(value: str, allow: frozenset[str]) -> bool:
    return (value in allow or value in (DEFAULT_LABEL, OVERFLOW_LABEL)
            or bool(HASHED_LABEL.match(value)))


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def check_exposition(text: str, *, markers: Iterable[str] = (), forbidden: Iterable[str] = (),
                     namespace_allow: Iterable[str] = ()) -> list[Violation]:
    """Every violation in a Prometheus text exposition (names, help, label names and values)."""
    markers_t, forbidden_t, allow = tuple(markers), tuple(forbidden), frozenset(namespace_allow)
    found: list[Violation] = []
    for family in text_string_to_metric_families(text):
        found += _scan(f"metric {family.name} name", family.name, markers_t, forbidden_t)
        found += _scan(f"metric {family.name} help", family.documentation, markers_t, forbidden_t)
        for sample in family.samples:
            for label, value in sample.labels.items():
                where = f"metric {sample.name} label {label}"
                found += _scan(where, label, markers_t, forbidden_t)
                found += _scan(where, value, markers_t, forbidden_t)
                if label in NAMESPACE_KEYS and not _namespace_ok(value, allow):
                    found.append(Violation(where=where, value=value, rule="raw_namespace"))
    return found


def check_spans(spans: Iterable[Any], *, markers: Iterable[str] = (),
                forbidden: Iterable[str] = (), namespace_allow: Iterable[str] = ()
                ) -> list[Violation]:
    """Every violation in finished SDK spans: names, attributes, event attributes, resource."""
    markers_t, forbidden_t, allow = tuple(markers), tuple(forbidden), frozenset(namespace_allow)
    found: list[Violation] = []
    for span in spans:
        found += _scan(f"span {span.name} name", span.name, markers_t, forbidden_t)
        attribute_sets = [("attribute", span.attributes or {}),
                          ("resource", span.resource.attributes if span.resource else {})]
        attribute_sets += [(f"event {e.name}", e.attributes or {}) for e in span.events]
        for kind, attributes in attribute_sets:
            for key, value in attributes.items():
                if isinstance(value, float):
                    continue  # a measurement (seconds, ratios): cannot hold ids or keys
                where, text = f"span {span.name} {kind} {key}", _as_text(value)
                found += _scan(where, key, markers_t, forbidden_t)
                found += _scan(where, text, markers_t, forbidden_t)
                if key in NAMESPACE_KEYS and not _namespace_ok(text, allow):
                    found.append(Violation(where=where, value=text, rule="raw_namespace"))
    return found

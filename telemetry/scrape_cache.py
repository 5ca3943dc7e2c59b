"""The `/metrics` body, rendered once per snapshot and format, shared by every scrape.

A scrape body has two parts::

    [ snapshot families ............................ ][ process families ][# EOF]
      kvctl_* from one Snapshot: rendered once per      process_* (CPU, RSS):
      (snapshot object, format), reused by every        rendered per scrape, they
      scrape that reads the same snapshot               change every time and cost little

Sources publish immutable snapshots (a live run refreshes one every `interval`; a remote
attach builds one per read, shared by concurrent scrapes through the collector's single
flight read), so the same `Snapshot` object means the same kvctl families, byte for byte.
Rendering the ~60 families of a large snapshot costs milliseconds on a small machine;
sixteen scrapers rendering the same snapshot each on their own was the p99 of a scrape
burst. Per format (text or OpenMetrics) the cache keeps the bodies of the last
`KEPT_SNAPSHOTS` snapshots it rendered, keyed by the snapshot's identity, and holds a
reference to each so the identity cannot be reused. Renders are single flight per format:
a burst of scrapes of a new snapshot waits for one render. Two entries, not one: a scrape
that read the previous snapshot just before a newer one was published, and reaches the
cache after it, finds its own body instead of rendering it again and evicting the newer
one (which the next scrape would then render a second time).

`kvctl_snapshot_read_seconds` in a cached body is the duration of the read that produced
that snapshot. A failed read (`kvctl_up 0`) is rendered fresh every scrape and never cached.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

from engine_adapter.snapshot import Snapshot
from telemetry.collector import SnapshotCollector

_EOF = b"# EOF\n"
KEPT_SNAPSHOTS = 2  # rendered bodies kept per format: the current snapshot and the previous


class _Families:
    """A registry-shaped wrapper over already built families (what encoders call)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class ScrapeRenderer:
    """Renders scrape bodies for one collector (plus optional per-scrape registries).

    Thread-safe: renders of the snapshot part are serialized per format, so a burst of
    scrapes of one snapshot renders it once and the rest wait for that render and reuse it.
    """

    def __init__(self, collector: SnapshotCollector,
                 per_scrape: CollectorRegistry | None = None) -> None:
        self._collector = collector
        self._per_scrape = per_scrape
        self._guard = threading.Lock()  # guards _locks and _cached
        self._locks: dict[str, threading.Lock] = {}  # content type -> its render lock
        # content type -> [(snapshot, body)], newest last, at most KEPT_SNAPSHOTS
        self._cached: dict[str, list[tuple[Snapshot, bytes]]] = {}
        self.renders = 0  # snapshot-part renders so far (the benchmark and tests read it)

    def body(self, accept_header: str | None, accept_encoding: str | None) -> tuple[bytes, list]:
        """(body, headers) for one scrape, negotiated as prometheus_client does."""
        encoder, content_type = choose_encoder(accept_header or "")
        snapshot_part = self._snapshot_part(encoder, content_type)
        openmetrics = snapshot_part.endswith(_EOF)
        if self._per_scrape is not None:
            if openmetrics:
                snapshot_part = snapshot_part[: -len(_EOF)]
            output = snapshot_part + encoder(self._per_scrape)
        else:
            output = snapshot_part
        headers = [("Content-Type", content_type)]
        if gzip_accepted(accept_encoding or ""):
            output = gzip.compress(output, compresslevel=6)
            headers.append(("Content-Encoding", "gzip"))
        return output, headers

    def _snapshot_part(self, encoder, content_type: str) -> bytes:
        read = self._collector.read()
        snapshot = read[0]
        if snapshot is None:  # the source is down: kvctl_up 0, never cached
            return encoder(_Families(self._collector.families(read)))
        with self._guard:
            lock = self._locks.setdefault(content_type, threading.Lock())
        with lock:  # single flight: one render per (snapshot, format)
            body = self._lookup(content_type, snapshot)
            if body is not None:
                return body
            body = encoder(_Families(self._collector.families(read)))
            with self._guard:
                entries = self._cached.setdefault(content_type, [])
                entries.append((snapshot, body))
                del entries[:-KEPT_SNAPSHOTS]
                self.renders += 1
            return body

    def _lookup(self, content_type: str, snapshot: Snapshot) -> bytes | None:
        with self._guard:
            for cached, body in self._cached.get(content_type, ()):
                if cached is snapshot:
                    return body
        return None

    def snapshot_part(self, accept_header: str | None = None) -> bytes:
        """The kvctl families of the current read as one scrape gets them (the cached body
        when the snapshot was rendered before). For tests and the benchmark."""
        encoder, content_type = choose_encoder(accept_header or "")
        return self._snapshot_part(encoder, content_type)

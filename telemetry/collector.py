"""A prometheus_client custom collector over any `SnapshotSource`.

Each scrape reads one snapshot and builds every family in `metrics_table.METRICS` from it,
so a label set that is no longer in the snapshot (an alert that cleared, a tenant whose last
request finished) is simply absent from the next scrape: nothing stale is ever kept.

Concurrent scrapes share reads (single flight): a scrape that arrives while a read is in
flight waits for it and is served its snapshot, so a burst of scrapes costs one engine read.
With `max_age_s` > 0, a scrape also reuses a read that started at most that long before it.
The source's `snapshot()` is never called from two threads at once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from engine_adapter.protocol import SnapshotSource
from engine_adapter.snapshot import Snapshot
from telemetry.fleet_metrics import FLEET_DOWN_FAMILIES
from telemetry.hygiene import NamespaceLabeler
from telemetry.metrics_table import METRICS, METRICS_BY_NAME, MetricSpec

log = logging.getLogger(__name__)
_UP = METRICS_BY_NAME["kvctl_up"]
# What a disconnected source still says truthfully: that it is down, and why (its alerts);
# a fleet whose every replica is down: which replicas are down, and what its router counts.
DOWN_FAMILIES: tuple[str, ...] = (
    "kvctl_snapshot_read_seconds", "kvctl_connected", "kvctl_alert_active", "kvctl_alerts_active",
    *FLEET_DOWN_FAMILIES,
)


class _SharedRead:
    """Single-flight snapshot reads with a maximum age. Thread-safe.

    A caller arriving while a read is in flight waits for that read and shares its result;
    otherwise it reuses the last result if that read started within `max_age_s`, else reads.
    """

    def __init__(self, source: SnapshotSource, max_age_s: float,
                 clock: Callable[[], float]) -> None:
        self._source = source
        self._max_age_s = max_age_s
        self._clock = clock
        self._cond = threading.Condition()
        self._in_flight = False
        self._reads_done = 0
        self._started = 0.0
        self._result: tuple[Snapshot | None, float, BaseException | None] | None = None

    def read(self) -> tuple[Snapshot | None, float, BaseException | None]:
        """(snapshot or None, seconds the read took, error or None). Never raises."""
        with self._cond:
            if self._in_flight:
                reads_done = self._reads_done
                while self._reads_done == reads_done:
                    self._cond.wait()
                return self._result
            arrival = self._clock()
            if self._result is not None and self._started >= arrival - self._max_age_s:
                return self._result
            self._in_flight, self._started = True, arrival
        started = self._clock()
        try:
            snapshot, error = self._source.snapshot(), None
        except Exception as err:  # an exporter must keep serving kvctl_up 0
            snapshot, error = None, err
        result = (snapshot, self._clock() - started, error)
        with self._cond:
            self._result = result
            self._in_flight = False
            self._reads_done += 1
            self._cond.notify_all()
        return result


class SnapshotCollector(Collector):
    """Exports `METRICS` from `source` on every collect().

    Registers itself with `registry`. Mutates nothing in the source (snapshot() only).
    When snapshot() raises, the scrape still succeeds with `kvctl_up 0` and no other family.
    When the source answers with a disconnected snapshot (a remote server that is down, never
    came up, or answers with something that is not its metrics), the scrape holds `kvctl_up 0`
    and only the families that describe the read (`DOWN_FAMILIES`): the snapshot's numbers are
    placeholders or stale, and an unknown value is absent, never 0 (issue 16 section 1).
    """

    def __init__(self, source: SnapshotSource, *, registry: CollectorRegistry,
                 labeler: NamespaceLabeler | None = None, max_age_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._reader = _SharedRead(source, max_age_s, clock)
        self._labeler = labeler if labeler is not None else NamespaceLabeler()
        self._last_error: str | None = None
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        """Family names and types without reading the engine (registry duplicate check)."""
        for spec in METRICS:
            yield _family(spec)

    def read(self) -> tuple[Snapshot | None, float, BaseException | None]:
        """One single-flight read: (snapshot or None, seconds it took, error or None)."""
        return self._reader.read()

    def collect(self) -> Iterator[Metric]:
        return self.families(self._reader.read())

    def families(self, read: tuple[Snapshot | None, float, BaseException | None]
                 ) -> Iterator[Metric]:
        """Every family for one `read()` result (`kvctl_up 0` alone when it failed)."""
        snapshot, read_seconds, error = read
        up = _family(_UP)
        up.add_metric([], 1.0 if snapshot is not None and snapshot.connected else 0.0)
        yield up
        if snapshot is None:
            message = f"{type(error).__name__}: {error}"
            if message != self._last_error:  # log once per distinct failure, not per scrape
                log.warning("snapshot read failed: %s", message)
            self._last_error = message
            return
        self._last_error = None
        fleet = bool(snapshot.replicas) or snapshot.router is not None
        for spec in METRICS:
            if spec is _UP or (not snapshot.connected and spec.name not in DOWN_FAMILIES):
                continue
            if spec.name in FLEET_DOWN_FAMILIES and not fleet:
                continue  # one engine exports no fleet family, not even an empty one
            family = _family(spec)
            if spec.read is None:  # kvctl_snapshot_read_seconds
                family.add_metric([], read_seconds)
            else:
                self._fill(family, spec, snapshot)
            yield family

    def _fill(self, family: Metric, spec: MetricSpec, snapshot: Snapshot) -> None:
        tenant_positions = [spec.labels.index(label) for label in spec.tenant_labels]
        merged: dict[tuple[str, ...], float] = {}
        for sample in spec.read(snapshot):
            if sample.value is None:  # not observable: no sample, never 0
                continue
            labels = list(sample.labels)
            for position in tenant_positions:
                labels[position] = self._labeler.label(labels[position])
            key = tuple(labels)
            # Two tenants folded into one label (overflow) add up instead of colliding.
            merged[key] = merged.get(key, 0.0) + sample.value
        for labels, value in merged.items():
            if spec.kind == "info":
                family.add_metric([], dict(zip(spec.labels, labels, strict=True)))
            else:
                family.add_metric(list(labels), value)


def _family(spec: MetricSpec) -> Metric:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
    if spec.kind == "info":
        return InfoMetricFamily(spec.name.removesuffix("_info"), spec.help)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)

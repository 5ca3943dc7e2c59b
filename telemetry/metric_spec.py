"""What a metric family is: `MetricSpec` and the `Sample`s its reader returns.

The tables that define families (`telemetry.metrics_table`, `telemetry.whatif_metrics`)
import these; this module imports neither, so the tables import one way
(metrics_table -> whatif_metrics -> metric_spec). The reading rule is metrics_table's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Literal, NamedTuple

from engine_adapter.snapshot import Snapshot

MetricKind = Literal["gauge", "counter", "info"]


class Sample(NamedTuple):
    labels: tuple[str, ...]
    value: float | None


@dataclass(frozen=True, kw_only=True)
class MetricSpec:
    """One metric family.

    name: the exposed name (a counter's includes `_total`; an info family's ends in `_info`).
    tenant_labels: labels whose values are tenant namespaces; the collector passes them
    through `telemetry.hygiene.NamespaceLabeler` (hashed unless allow-listed, seed 000 0x0CE).
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    read: Callable[[Snapshot], Iterable[Sample]] | None = None
    tenant_labels: tuple[str, ...] = ()

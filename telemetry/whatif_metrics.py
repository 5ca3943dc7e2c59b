"""Metric families of the live what-if curve (engine_adapter/instrument/whatif.py),
appended to `telemetry.metrics_table.METRICS`.

    kvctl_whatif_hit_ratio{pool_scale="0.25"|"0.5"|"1"|"2"|"4"|"8"}
        estimated H_prefix (seed 003 eq. 2) if the pool were pool_scale x its size (LRU)
    kvctl_whatif_measured_hit_ratio
        H_prefix the engine measured over the same requests the shadow saw (the trust
        check: compare with pool_scale="1")
    kvctl_whatif_sample_rate
        the shadow's spatial sample rate past its fully shadowed first pages

A source without a shadow (a remote server without the plugin, the shadow turned off)
has `Snapshot.whatif = None`: no sample is exported, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine_adapter.snapshot import Snapshot
from telemetry.metric_spec import MetricSpec, Sample


def _points(s: Snapshot) -> Iterable[Sample]:
    if s.whatif is None:
        return ()
    return (Sample((f"{p.pool_scale:g}",), p.hit_rate) for p in s.whatif.points)


def _measured(s: Snapshot) -> Iterable[Sample]:
    return (Sample((), None if s.whatif is None else s.whatif.measured_hit_rate),)


def _rate(s: Snapshot) -> Iterable[Sample]:
    return (Sample((), None if s.whatif is None else s.whatif.sample_rate),)


WHATIF_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(name="kvctl_whatif_hit_ratio", kind="gauge", labels=("pool_scale",),
               read=_points,
               help="Estimated H_prefix if the pool were pool_scale x its size (sampled "
                    "shadow, LRU assumed)."),
    MetricSpec(name="kvctl_whatif_measured_hit_ratio", kind="gauge", read=_measured,
               help="H_prefix the engine measured over the requests the what-if shadow saw "
                    "(compare with kvctl_whatif_hit_ratio{pool_scale=\"1\"})."),
    MetricSpec(name="kvctl_whatif_sample_rate", kind="gauge", read=_rate,
               help="Spatial sample rate of the what-if shadow (its first pages: all)."),
)

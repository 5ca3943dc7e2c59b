"""The live what-if shadow (engine_adapter/instrument/whatif.py), what it puts in a
snapshot, and how the exporter and `kvctl inspect` show it (or say it is not observable)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from engine_adapter.instrument.whatif import POOL_SCALES, WhatIfShadow
from engine_adapter.whatif_view import WhatIfCurve, WhatIfPoint
from kvctl.cli.inspect import whatif_line
from kvctl.replay.curve.profile import build_curve
from kvctl.replay.curve.stream import mooncake_stream
from kvctl.replay.mooncake import iter_records
from support.telemetry_fixtures import FixedSnapshotSource, seed_snapshot
from telemetry.collector import SnapshotCollector
from telemetry.hygiene import NamespaceLabeler

pytestmark = pytest.mark.unit

HEAD = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"
POOL = 200_000


def _fed(rate: float, **kwargs) -> WhatIfShadow:
    shadow = WhatIfShadow(pool_tokens=POOL, page_size=16, rate=rate, seed=11, **kwargs)
    for record in iter_records(HEAD):
        shadow.observe_tokens(np.zeros(record.input_length), block_ids=record.hash_ids,
                              output_tokens=record.output_length)
    return shadow


def test_at_rate_one_the_shadow_is_the_exact_curve():
    """Unsampled, the six mini-caches are exact LRUs over the same page stream as the
    one-pass curve: the same hit rate at every scale of a 200k-token pool, on head_500."""
    exact = build_curve(mooncake_stream(HEAD, page_size=16))
    curve = _fed(1.0, max_keys_per_scale=10**6).curve()
    assert [p.pool_scale for p in curve.points] == list(POOL_SCALES)
    assert [p.hit_rate for p in curve.points] == pytest.approx(
        [exact.hit_rate(int(s * POOL)) for s in POOL_SCALES], abs=1e-12)
    assert not any(p.capped for p in curve.points)


def test_the_key_bound_holds_and_flags_the_scales_it_cut():
    """With 100 keys per scale, no mini-cache ever holds more, and every scale whose pool
    would hold more is flagged capped (its estimate is a lower bound)."""
    shadow = _fed(0.5, max_keys_per_scale=100)
    curve = shadow.curve()
    assert curve.shadow_keys <= 6 * 100 and curve.max_keys == 600
    assert all(p.capped for p in curve.points)


def test_no_request_yet_is_no_estimate_not_zero():
    """Before any request, every point's hit rate and the measured figure are None."""
    curve = WhatIfShadow(pool_tokens=POOL, page_size=16).curve()
    assert [p.hit_rate for p in curve.points] == [None] * 6
    assert curve.measured_hit_rate is None and curve.error_1x is None


def test_namespaces_never_share_pages():
    """The same prompt twice in two namespaces hits nothing (SGLang's tree keeps them
    apart); twice in one namespace it hits its first 5 pages (S-1 cap: 95 tokens -> 5)."""
    tokens = np.arange(1, 97)
    for namespaces, expected in ((("a", "b"), 0.0), (("a", "a"), 80 / 192)):
        shadow = WhatIfShadow(pool_tokens=POOL, page_size=16, rate=1.0, seed=3)
        for namespace in namespaces:
            shadow.observe_tokens(tokens, namespace=namespace, cached_tokens=0)
        assert shadow.curve().at(1.0).hit_rate == pytest.approx(expected)


def test_gain_line_reads_like_the_issue():
    """'2x pool: 31.0% -> 37.2% (est., LRU; 1x measured 30.8%)'."""
    points = tuple(WhatIfPoint(pool_scale=s, pool_tokens=int(s * 1000), hit_rate=h, capped=False)
                   for s, h in ((1.0, 0.31), (2.0, 0.372)))
    curve = WhatIfCurve(points=points, sample_rate=0.01, full_depth_pages=32, requests=9,
                        prompt_tokens=900, shadow_keys=10, max_keys=100, measured_hit_rate=0.308)
    assert curve.gain_line(2.0) == "2x pool: 31.0% -> 37.2% (est., LRU; 1x measured 30.8%)"
    assert curve.error_1x == pytest.approx(0.002)


def test_a_source_without_a_shadow_exports_nothing_and_inspect_says_so():
    """Snapshot.whatif None (a server without the plugin): no kvctl_whatif_* sample at all
    (never 0), and inspect's line says not observable."""
    snapshot = seed_snapshot()
    assert snapshot.whatif is None
    registry = CollectorRegistry()
    SnapshotCollector(FixedSnapshotSource((snapshot,)), registry=registry,
                      labeler=NamespaceLabeler(salt=b"t"))
    names = {s.name for family in registry.collect() for s in family.samples}
    assert not {n for n in names if n.startswith("kvctl_whatif")}
    assert whatif_line(snapshot) == "not observable (needs the kvctl plugin)"


def test_a_snapshot_with_a_shadow_exports_every_scale():
    """With a curve, one kvctl_whatif_hit_ratio per scale (labels '0.25' .. '8') and the
    measured ratio."""
    import dataclasses

    points = tuple(WhatIfPoint(pool_scale=s, pool_tokens=int(s * 12), hit_rate=s / 16,
                               capped=False) for s in POOL_SCALES)
    curve = WhatIfCurve(points=points, sample_rate=0.01, full_depth_pages=32, requests=3,
                        prompt_tokens=90, shadow_keys=4, max_keys=600, measured_hit_rate=0.0625)
    registry = CollectorRegistry()
    SnapshotCollector(FixedSnapshotSource((dataclasses.replace(seed_snapshot(), whatif=curve),)),
                      registry=registry, labeler=NamespaceLabeler(salt=b"t"))
    values = {label: registry.get_sample_value("kvctl_whatif_hit_ratio", {"pool_scale": label})
              for label in ("0.25", "0.5", "1", "2", "4", "8")}
    assert values == {"0.25": 0.015625, "0.5": 0.03125, "1": 0.0625, "2": 0.125, "4": 0.25,
                      "8": 0.5}
    assert registry.get_sample_value("kvctl_whatif_measured_hit_ratio") == 0.0625

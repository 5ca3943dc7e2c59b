"""Remote reconciliation band and reconnect backoff (reconcile.py, backoff.py).

Band (SGLang 0.5.23 pool_stats_observer): kv_evictable <= mirror GPU slots <= kv_evictable
+ kv_used. Tolerance max(pages * page_size, ceil(pool_fraction * pool)).
"""

from __future__ import annotations

import pytest

from engine_adapter.remote.backoff import Backoff
from engine_adapter.remote.reconcile import DriftTolerance, drift_alert, reconcile

pytestmark = pytest.mark.unit

TOL = DriftTolerance(pages=2, pool_fraction=0.01, consecutive_reads=2)


def rec(blocks, evictable=64, used=32, page=16, pool=1_000):
    return reconcile(
        mirror_blocks=blocks,
        page_size=page,
        evictable_tokens=evictable,
        used_tokens=used,
        pool_tokens=pool,
        tolerance=TOL,
    )


def test_inside_the_band_has_no_drift():
    """5 pages x 16 = 80 slots lies in [64, 96]."""
    assert (rec(5).mirror_slots, rec(5).drift_tokens) == (80, 0)


def test_above_the_band_is_positive_drift():
    """10 pages = 160 slots is 64 above evictable+used = 96."""
    assert rec(10).drift_tokens == 64


def test_below_the_band_is_negative_drift():
    """2 pages = 32 slots is 32 below evictable = 64."""
    assert rec(2).drift_tokens == -32


def test_tolerance_is_pages_or_pool_fraction():
    """max(2 x 16, ceil(0.01 x 10,000)) = 100 tokens."""
    assert rec(5, pool=10_000).tolerance_tokens == 100


def test_drift_within_tolerance_is_not_alerted():
    """A 32-token drift with a 32-token tolerance is within tolerance."""
    assert rec(2).within_tolerance


def test_alert_needs_consecutive_reads():
    """A drift beyond tolerance alerts only from the required streak on."""
    result = rec(10)
    assert drift_alert(result, streak=1, required=2, mirror_complete=True) is None
    alert = drift_alert(result, streak=2, required=2, mirror_complete=True)
    assert alert.name == "remote_reconciliation_drift" and "+64" in alert.evidence


def test_backoff_doubles_to_the_cap():
    """0.5, 1, 2, 4 ... seconds, capped at 30."""
    backoff = Backoff()
    delays = [backoff.failed(0.0) for _ in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_backoff_blocks_until_due():
    """After a failure at t=10 with delay 0.5, t=10.4 is not ready and t=10.5 is."""
    backoff = Backoff()
    backoff.failed(10.0)
    assert (backoff.ready(10.4), backoff.ready(10.5)) == (False, True)


def test_success_resets_backoff():
    """A success makes the next failure wait the initial delay again."""
    backoff = Backoff()
    backoff.failed(0.0)
    backoff.failed(1.0)
    backoff.succeeded()
    assert (backoff.ready(0.0), backoff.failed(5.0)) == (True, 0.5)

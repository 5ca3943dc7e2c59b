"""PoolPeaks means: the step function of the per-step end states, integrated in virtual time."""

from __future__ import annotations

import pytest

from kvctl.replay.peaks import PoolPeaks

pytestmark = pytest.mark.unit


def test_means_weight_each_state_by_the_time_it_held():
    """Pool 100: free 100 for 1 s, free 20 (evictable 30) for 3 s, then free 60 at t=4.
    U_KV: (0 x 1 + 0.8 x 3) / 4 = 0.6; token_usage: (0 x 1 + 0.5 x 3) / 4 = 0.375."""
    gauges = PoolPeaks(100)
    gauges.observe(100, 0, 0.0)
    gauges.observe(20, 30, 1.0)
    gauges.observe(60, 0, 4.0)
    assert gauges.mean_u_kv == pytest.approx(0.6)
    assert gauges.mean_token_usage == pytest.approx(0.375)
    assert (gauges.u_kv, gauges.token_usage) == (0.8, 0.5)


def test_without_elapsed_time_the_mean_is_the_plain_mean():
    """Two states at the same instant: (0.0 + 0.5) / 2."""
    gauges = PoolPeaks(100)
    gauges.observe(100, 0, 2.0)
    gauges.observe(50, 0, 2.0)
    assert gauges.mean_u_kv == pytest.approx(0.25)

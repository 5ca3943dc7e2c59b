"""Pure presentation helpers of the monitor: bar cells, sparklines, histories, wording."""

from __future__ import annotations

import pytest

from engine_adapter.snapshot import PoolLedger
from kvctl.tui.series import Series, windowed_rate
from kvctl.tui.widgets.common.fixed_sparkline import sparkline_text
from kvctl.tui.widgets.pool.partition import Segment, cells, segments

pytestmark = pytest.mark.tui


def ledger(**overrides):
    values = dict(
        page_size=16,
        pool_tokens=1024,
        free_tokens=512,
        evictable_tokens=256,
        used_tokens=256,
        protected_tokens=192,
        private_tokens=64,
    )
    values.update(overrides)
    return PoolLedger(**values)


def test_segments_split_used_into_protected_and_private():
    """An embedded ledger shows free, evictable, protected, private (seed 000 0x0CF)."""
    assert segments(ledger()) == [
        Segment("free", 512),
        Segment("evictable", 256),
        Segment("protected", 192),
        Segment("private", 64),
    ]


def test_segments_remote_ledger_has_one_used_segment():
    """Without protected/private (remote), `used` is one segment, never a guessed split."""
    parts = segments(ledger(protected_tokens=None, private_tokens=None))
    assert [p.name for p in parts] == ["free", "evictable", "used"]


def test_segments_show_a_leak():
    """Slots accounted to nobody appear as a residual segment."""
    parts = segments(ledger(free_tokens=480))
    assert parts[-1] == Segment("residual", 32)


def test_cells_sum_to_width_proportionally():
    """512/256/192/64 of 1024 over 32 cells is 16/8/6/2."""
    assert cells(segments(ledger()), 32) == [16, 8, 6, 2]


def test_cells_keep_a_tiny_segment_visible():
    """A 1-token residual still gets a cell (borrowed from the widest segment)."""
    parts = [Segment("free", 10_000), Segment("residual", 1)]
    assert cells(parts, 10) == [9, 1]


def test_sparkline_levels_on_fixed_scale():
    """0 is blank, any positive value at least one eighth, 1.0 a full block, clamped."""
    assert sparkline_text([0.0, 0.01, 0.5, 1.0, 1.7, -0.2], 10) == " ▁▄██ "


def test_sparkline_keeps_newest_points():
    """Only the last `width` points are drawn."""
    assert sparkline_text([1.0, 0.0, 0.5], 2) == " ▄"


def test_series_one_point_per_seq():
    """Re-reading the same snapshot (same seq) adds no point."""
    series = Series(capacity=3)
    assert series.push(1, 0.1) and not series.push(1, 0.2)
    series.push(2, 0.2)
    series.push(3, 0.3)
    series.push(4, 0.4)
    assert series.values() == (0.2, 0.3, 0.4)


def test_windowed_rate_uses_deltas():
    """seed 003 eq. (2) over a window: hits gained / prompt tokens gained since i - window."""
    points = [(100, 50), (200, 50), (300, 150), (300, 150)]
    rates = windowed_rate(points, window=1)
    assert rates == [0.5, 0.0, 1.0, 0.5]  # last: no new prompts -> cumulative 150/300

"""Sweep option parsing, the grid, run labels and the ranking rule (no engine)."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.replay.runner import ReplaySettings
from kvctl.replay.sweep import SweepRow, grid, hit_vs_pool_points, parse_sweeps, ranked, slug

pytestmark = pytest.mark.unit

BASE = ReplaySettings(workload="t.jsonl", pool_gb=3.0)


def test_sweep_options_become_ordered_axes():
    """Two options give two axes, values split on commas, underscores accepted in keys."""
    axes = parse_sweeps(["eviction=lru,lfu,slru", "pool_tokens=200000, 400000"])
    assert axes == {"eviction": ["lru", "lfu", "slru"], "pool-tokens": ["200000", "400000"]}


def test_unknown_sweep_key_lists_the_valid_ones():
    """A typo names every key that can be swept."""
    with pytest.raises(InputError, match="KEY one of eviction, pool-tokens, pool-gb, page-size, "
                                         "retention, tau-high, tree-core, token-budget, "
                                         "chunked-prefill-size, max-prefill-tokens, "
                                         "schedule-policy, max-running, decode-quantum"):
        parse_sweeps(["evict=lru"])


def test_unparsable_sweep_value_is_named():
    """pool-tokens takes integers."""
    with pytest.raises(InputError, match="--sweep pool-tokens: 'big' is not a valid int"):
        parse_sweeps(["pool-tokens=100,big"])


def test_repeated_axis_is_rejected():
    """One key, one option: repeating it would silently drop values."""
    with pytest.raises(InputError, match="--sweep eviction given twice"):
        parse_sweeps(["eviction=lru", "eviction=lfu"])


def test_grid_is_the_cartesian_product_first_axis_slowest():
    """3 policies x 2 pools = 6 runs in order, each labelled; a swept pool replaces --pool-gb."""
    runs = grid(BASE, parse_sweeps(["eviction=lru,lfu,slru", "pool-tokens=200000,400000"]))
    assert [r.label for r in runs] == [
        "eviction=lru pool-tokens=200000", "eviction=lru pool-tokens=400000",
        "eviction=lfu pool-tokens=200000", "eviction=lfu pool-tokens=400000",
        "eviction=slru pool-tokens=200000", "eviction=slru pool-tokens=400000",
    ]
    assert (runs[3].eviction_policy, runs[3].pool_tokens, runs[3].pool_gb) == ("lfu", 400000, None)


def test_run_label_becomes_a_safe_directory_name():
    """'eviction=lru pool-tokens=2' -> 'eviction-lru_pool-tokens-2'."""
    assert slug("eviction=lru pool-tokens=2") == "eviction-lru_pool-tokens-2"
    assert slug("tau-high=0.9") == "tau-high-0.9"


def _row(label: str, pool: int, hit: float) -> SweepRow:
    return SweepRow(rank=0, label=label, params=dict(p.split("=") for p in label.split()),
                    pool_tokens=pool, hit_rate=hit, evictions=0, evicted_tokens=0, retractions=0,
                    ttft_p99_s=None, peak_kv_utilization=0.0)


def test_hit_vs_pool_points_group_by_the_other_axes():
    """Series are named by the non-pool parameters; x is the resolved pool in tokens."""
    rows = [_row("eviction=lru pool-tokens=1", 1, 0.1), _row("eviction=lru pool-tokens=2", 2, 0.2)]
    assert hit_vs_pool_points(rows) == [("eviction=lru", 1, 0.1), ("eviction=lru", 2, 0.2)]


def test_no_pool_axis_no_pool_plot():
    """With one pool size there is nothing to plot against it."""
    assert hit_vs_pool_points([_row("eviction=lru", 5, 0.1), _row("eviction=lfu", 5, 0.2)]) == []


def test_ranking_prefers_hit_rate_then_fewer_evictions_then_latency():
    """0.5 beats 0.4; at equal hit rate 3 evictions beat 9; then the lower modeled p99 TTFT."""
    from dataclasses import replace

    rows = [replace(_row("a=1", 1, 0.4)),
            replace(_row("a=2", 1, 0.5), evictions=9),
            replace(_row("a=3", 1, 0.5), evictions=3, ttft_p99_s=2.0),
            replace(_row("a=4", 1, 0.5), evictions=3, ttft_p99_s=1.0)]
    assert [(r.rank, r.label) for r in ranked(rows)] == [(1, "a=4"), (2, "a=3"), (3, "a=2"), (4, "a=1")]

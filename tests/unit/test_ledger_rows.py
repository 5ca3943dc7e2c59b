"""How inspect (kvctl/cli/ledger_rows.py) and monitor (tui ledger_table) show a plugin-fed
ledger: the plugin's one sample with its sum checked against the pool, SGLang's own gauges
on a row of their own labelled as SGLang's, and one row per DP rank."""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.remote.plugin_ranks import sum_ranks
from kvctl.cli.ledger_rows import ledger_rows
from kvctl.tui.widgets.pool.ledger_table import ledger_text
from support.telemetry_fixtures import seed_snapshot

pytestmark = pytest.mark.unit

SGLANG = dataclasses.replace(seed_snapshot().ledger, page_size=1, pool_tokens=12,
                             free_tokens=1, evictable_tokens=2, used_tokens=9,
                             protected_tokens=None, private_tokens=None)


def _dp_snapshot():
    rank1 = dataclasses.replace(seed_snapshot().ledger, free_tokens=1, evictable_tokens=6,
                                protected_tokens=4, private_tokens=1, used_tokens=5)
    total = sum_ranks([("http://h:1", seed_snapshot()),
                       ("http://h:2", seed_snapshot(ledger=rank1))])
    return dataclasses.replace(total, server_ledger=SGLANG)


def test_inspect_rows_show_the_sample_sglang_and_each_rank():
    """Rows: pool 24; the summed sample 4/8/9/3 (sum 24 = pool); SGLang's 1/2/9 of 12
    marked as lagging; rank 0 3/2/5/2 and rank 1 1/6/4/1, each of 12."""
    assert ledger_rows(_dp_snapshot()) == [
        ("pool tokens", "24"),
        ("free / evictable / protected / private", "4 / 8 / 9 / 3 (sum 24 = pool)"),
        ("SGLang /metrics free / evictable / used", "1 / 2 / 9 of 12 (lags)"),
        ("DP rank 0 free / evictable / protected / private", "3 / 2 / 5 / 2 (sum 12 = pool) of 12"),
        ("DP rank 1 free / evictable / protected / private", "1 / 6 / 4 / 1 (sum 12 = pool) of 12"),
    ]


def test_a_sample_that_does_not_add_up_says_so():
    """A ledger whose terms miss the pool is shown with the difference, never as balanced."""
    off = dataclasses.replace(seed_snapshot().ledger, free_tokens=4)
    rows = dict(ledger_rows(seed_snapshot(ledger=off)))
    assert rows["free / evictable / protected / private"] == "4 / 2 / 5 / 2 (sum 13 != pool 12)"


def test_monitor_ledger_text_labels_sglang_and_the_ranks():
    """The monitor's ledger panel ends with SGLang's gauges (lags) and one line per rank."""
    lines = ledger_text(_dp_snapshot()).plain.splitlines()
    assert lines[-3:] == [
        "SGLang /metrics (lags): free 1  evictable 2  used 9",
        "DP rank 0: free 3  evictable 2  protected 5  private 2  of 12",
        "DP rank 1: free 1  evictable 6  protected 4  private 1  of 12",
    ]

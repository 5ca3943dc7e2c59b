"""Timeline sampling, decimation, windows and CSV; percentiles and time-weighted means."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest

from kvctl.replay.report import percentiles
from kvctl.replay.timeline import COLUMNS, TimelineRecorder, TimelineRow, time_weighted_mean, to_csv

pytestmark = pytest.mark.unit

ZERO = TimelineRow(
    step=0, virtual_time_s=0.0, requests_submitted=0, requests_finished=0, prompt_tokens=0,
    hit_tokens=0, hit_rate_cumulative=0.0, hit_rate_window=0.0, u_kv=0.0, token_usage=0.0,
    free_tokens=0, evictable_tokens=0, protected_tokens=0, private_tokens=0, host_tokens=0,
    evicted_tokens=0, retractions=0, mapping_lag_tokens=0, prefill_tokens_step=0,
    decode_requests_step=0, ledger_residual_tokens=0,
)


def row(step: int, prompt: int = 0, hits: int = 0) -> TimelineRow:
    return replace(ZERO, step=step, virtual_time_s=step / 10, prompt_tokens=prompt, hit_tokens=hits)


def test_recorder_keeps_every_step_until_full():
    """max_rows 4: steps 0..3 are all kept at interval 1."""
    recorder = TimelineRecorder(max_rows=4)
    for step in range(4):
        assert recorder.wants(step)
        recorder.add(row(step))
    assert [r.step for r in recorder.rows()] == [0, 1, 2, 3]
    assert recorder.every == 1


def test_overflow_halves_the_rows_and_doubles_the_interval():
    """A fifth row at max_rows 4 leaves steps 0, 2, 4 and interval 2; then 0, 4, 8 at 4."""
    recorder = TimelineRecorder(max_rows=4)
    for step in range(5):
        recorder.add(row(step))
    assert [r.step for r in recorder.rows()] == [0, 2, 4]
    assert recorder.every == 2 and not recorder.wants(5)
    for step in (6, 8):
        recorder.add(row(step))
    assert [r.step for r in recorder.rows()] == [0, 4, 8]
    assert recorder.every == 4


def test_finish_records_an_off_grid_last_step_once():
    """The final step is kept even off the sampling grid, and never twice."""
    recorder = TimelineRecorder(max_rows=10, every=4)
    recorder.add(row(0))
    recorder.add(row(4))
    recorder.finish(row(7))
    recorder.finish(row(7))
    assert [r.step for r in recorder.rows()] == [0, 4, 7]


def test_window_hit_rate_is_between_kept_rows():
    """Windows: (0 -> 1000 prompt, 100 hit) = 0.1, then (1000 -> 3000, 100 -> 1100) = 0.5;
    a window with no new prompt tokens carries the previous value."""
    recorder = TimelineRecorder(max_rows=10)
    for r in (row(0), row(1, 1000, 100), row(2, 3000, 1100), row(3, 3000, 1100)):
        recorder.add(r)
    assert [r.hit_rate_window for r in recorder.rows()] == [0.0, 0.1, 0.5, 0.5]


def test_csv_has_a_header_and_one_line_per_row():
    """The CSV header is the row fields in order; values round-trip."""
    text = to_csv([row(0), row(5, 40, 4)])
    table = list(csv.reader(io.StringIO(text)))
    assert tuple(table[0]) == COLUMNS
    assert table[2][COLUMNS.index("step")] == "5"
    assert table[2][COLUMNS.index("virtual_time_s")] == "0.5"
    assert len(table) == 3


def test_time_weighted_mean_holds_each_value_until_the_next_sample():
    """0.2 for 1 s then 0.8 for 3 s: (0.2 + 2.4) / 4 = 0.65; the last value has no width."""
    assert time_weighted_mean([0.0, 1.0, 4.0], [0.2, 0.8, 0.1]) == pytest.approx(0.65)


def test_time_weighted_mean_without_elapsed_time_is_the_plain_mean():
    """All samples at one instant: the arithmetic mean."""
    assert time_weighted_mean([2.0, 2.0], [0.2, 0.4]) == pytest.approx(0.3)


def test_percentiles_interpolate_linearly():
    """1..100: p50 = 50.5, p99 = 99.01, mean 50.5 (numpy's linear method)."""
    result = percentiles(list(range(1, 101)))
    assert (result.p50, result.p99, result.mean, result.count) == (50.5, pytest.approx(99.01), 50.5, 100)


def test_percentiles_of_nothing_are_none():
    """No finished request: no latency figures rather than zeros."""
    result = percentiles([])
    assert (result.p50, result.p99, result.mean, result.count) == (None, None, None, 0)


def test_rolling_hit_rate_spans_the_last_samples():
    """Span 2 over cumulative (prompt, hit) = (0,0) (100,10) (200,60) (400,60):
    0, 10/100, 60/200, 50/300; a span with nothing admitted keeps the previous value."""
    from kvctl.replay.plots import rolling_hit_rate

    rows = [row(0), row(1, 100, 10), row(2, 200, 60), row(3, 400, 60), row(4, 400, 60), row(5, 400, 60)]
    assert rolling_hit_rate(rows, 2) == pytest.approx([0.0, 0.1, 0.3, 50 / 300, 0.0, 0.0])

"""Timeline sampling on the virtual-time grid, decimation, windows and CSV; per-step pool
peaks; percentiles and time-weighted means."""

from __future__ import annotations

import csv
import io
from dataclasses import replace

import pytest

from engine_adapter.snapshot import PoolLedger
from kvctl.replay.peaks import PoolPeaks
from kvctl.replay.report import percentiles
from kvctl.replay.timeline import (COLUMNS, HORIZON_FILL, TimelineRecorder, TimelineRow, for_horizon,
                                   to_csv)

pytestmark = pytest.mark.unit

ZERO = TimelineRow(
    step=0, virtual_time_s=0.0, requests_submitted=0, requests_finished=0, prompt_tokens=0,
    hit_tokens=0, hit_rate_cumulative=0.0, hit_rate_window=0.0, u_kv=0.0, token_usage=0.0,
    free_tokens=0, evictable_tokens=0, protected_tokens=0, private_tokens=0, host_tokens=0,
    evicted_tokens=0, retractions=0, mapping_lag_tokens=0, prefill_tokens_step=0,
    decode_requests_step=0, ledger_residual_tokens=0,
)


def row(step: int, prompt: int = 0, hits: int = 0, *, t: float | None = None) -> TimelineRow:
    """A row at step `step`, at virtual time `t` (default: step / 10)."""
    return replace(ZERO, step=step, virtual_time_s=step / 10 if t is None else t,
                   prompt_tokens=prompt, hit_tokens=hits)


def feed(recorder: TimelineRecorder, times: list[float]) -> list[int]:
    """Step the clock through `times` as a replay does (row i at step i, the first at
    times[0]); returns the steps the recorder wanted sampled."""
    recorder.add(row(0, t=times[0]))
    wanted = []
    for step in range(1, len(times)):
        if recorder.wants_between(times[step - 1], times[step]):
            wanted.append(step)
            recorder.add(row(step, t=times[step]))
    return wanted


def test_every_step_start_keeps_every_step_until_full():
    """every_s = 0 (no horizon), max_rows 4: steps 0..3 are all sampled, even with no time
    between them, and the grid reported is 0.0 (every step)."""
    recorder = TimelineRecorder(max_rows=4)
    assert feed(recorder, [0.0, 1.0, 1.0, 2.5]) == [1, 2, 3]
    assert [r.step for r in recorder.rows()] == [0, 1, 2, 3]
    assert recorder.every_s == 0.0 and recorder.sample_every_s == 0.0


def test_first_overflow_takes_the_grid_from_the_span_so_far():
    """Five rows over 4 s at max_rows 4: every_s = 2 x 4 s / 4 = 2 s, rows at 0, 2, 4 s."""
    recorder = TimelineRecorder(max_rows=4)
    feed(recorder, [0.0, 1.0, 2.0, 3.0, 4.0])
    assert recorder.every_s == 2.0 and recorder.sample_every_s == 2.0
    assert [r.virtual_time_s for r in recorder.rows()] == [0.0, 2.0, 4.0]


def test_overflow_doubles_the_grid_and_keeps_the_first_row_at_or_after_each_multiple():
    """every_s 1 s, max_rows 4, rows at 0, 1.5, 2.5, 3.25, 4.5 s: the fifth overflows,
    every_s becomes 2 s and the first row in each 2 s cell stays (0, 2.5, 4.5)."""
    recorder = TimelineRecorder(max_rows=4, every_s=1.0)
    assert feed(recorder, [0.0, 1.5, 2.5, 3.25, 4.5]) == [1, 2, 3, 4]
    assert recorder.every_s == 2.0
    assert [r.virtual_time_s for r in recorder.rows()] == [0.0, 2.5, 4.5]


def test_cadence_samples_only_when_the_clock_crosses_a_multiple():
    """every_s 1 s: (0.5, 0.9] crosses nothing, (0.9, 1.0] crosses 1 s, (1.0, 3.5] crosses
    two multiples and is one sample; the grid is reported once a step went unsampled."""
    recorder = TimelineRecorder(max_rows=100, every_s=1.0)
    assert recorder.wants_between(0.9, 1.0) and recorder.wants_between(1.0, 3.5)
    assert recorder.sample_every_s == 0.0  # every step so far was sampled
    assert not recorder.wants_between(0.5, 0.9)
    assert recorder.sample_every_s == 1.0
    assert not recorder.wants_between(3.5, 3.5)  # a step that takes no time


def test_horizon_start_fills_part_of_the_rows_by_the_last_arrival():
    """for_horizon(800 s, 1000 rows) = 800 / (0.8 x 1000) = 1 s; unknown or zero: every step.
    A 1,800 s run at 0.1 s steps with that start: one sample per second (800 by the
    horizon); at 1,000 s row 1,001 overflows, every_s becomes 2 s (rows 0, 2, ... 1,000 s),
    then one sample per 2 s: 1,000 + 400 snapshots for 18,000 steps, 501 + 400 rows."""
    assert HORIZON_FILL == 0.8
    assert for_horizon(800.0, 1000) == 1.0
    assert for_horizon(None, 1000) == 0.0 and for_horizon(0.0, 1000) == 0.0
    recorder = TimelineRecorder(max_rows=1000, every_s=for_horizon(800.0, 1000))
    times = [i / 10 for i in range(18_001)]
    wanted = feed(recorder, times)
    assert len([s for s in wanted if times[s] <= 800.0]) == 800
    assert len(wanted) == 1400 and recorder.every_s == 2.0
    kept = recorder.rows()
    assert len(kept) == 901 and kept[-1].virtual_time_s == 1800.0
    cells = [r.virtual_time_s // 2.0 for r in kept]
    assert cells == sorted(set(cells))  # one row per 2 s cell, in order


def test_rows_stay_bounded_and_on_the_grid_over_irregular_steps():
    """30,000 steps of irregular length (decode steps, long prefills, idle gaps) from every
    step: at most max_rows rows, the first row kept, each later row alone in its cell."""
    recorder = TimelineRecorder(max_rows=50)
    durations = [0.01, 0.02, 0.5, 0.013, 3.0, 0.011, 0.04]
    times = [0.0]
    for i in range(30_000):
        times.append(times[-1] + durations[i % len(durations)])
    feed(recorder, times)
    kept = recorder.rows()
    every = recorder.every_s
    assert every > 0 and len(kept) <= 50 and kept[0].step == 0
    cells = [r.virtual_time_s // every for r in kept]
    assert all(b > a for a, b in zip(cells, cells[1:]))


def test_no_time_passing_keeps_the_first_and_last_row_and_every_step():
    """Overflow before any virtual time passed: no grid can be chosen, so the first and
    the last row stay and every step is still sampled."""
    recorder = TimelineRecorder(max_rows=3)
    feed(recorder, [0.0, 0.0, 0.0, 0.0])
    assert [r.step for r in recorder.rows()] == [0, 3]
    assert recorder.every_s == 0.0 and recorder.wants_between(0.0, 0.0)


def test_finish_records_an_off_grid_last_step_once():
    """The final step is kept even off the sampling grid, and never twice."""
    recorder = TimelineRecorder(max_rows=10, every_s=4.0)
    recorder.add(row(0, t=0.0))
    recorder.add(row(4, t=4.0))
    recorder.finish(row(7, t=4.5))
    recorder.finish(row(7, t=4.5))
    assert [r.step for r in recorder.rows()] == [0, 4, 7]


def test_recorder_refuses_a_negative_grid_or_too_few_rows():
    with pytest.raises(ValueError):
        TimelineRecorder(max_rows=10, every_s=-1.0)
    with pytest.raises(ValueError):
        TimelineRecorder(max_rows=1)


def test_pool_peaks_are_the_ledgers_formulas_at_the_least_free_and_least_unused():
    """Pool 1,000: (free, evictable) = (600, 100), (200, 500), (300, 50): U_KV peaks where
    free is least (0.8), token_usage where free + evictable is least (0.65), each the value
    the pool ledger computes for that step."""
    steps = [(600, 100), (200, 500), (300, 50)]
    peaks = PoolPeaks(1000)
    for clock, (free, evictable) in enumerate(steps):
        peaks.observe(free, evictable, float(clock))
    ledgers = [PoolLedger(page_size=16, pool_tokens=1000, free_tokens=f, evictable_tokens=e,
                          used_tokens=1000 - f - e, protected_tokens=0, private_tokens=1000 - f - e)
               for f, e in steps]
    assert peaks.u_kv == max(led.u_kv for led in ledgers) == 0.8
    assert peaks.token_usage == max(led.token_usage for led in ledgers) == 0.65


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

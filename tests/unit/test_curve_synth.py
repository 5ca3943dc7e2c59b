"""synth.py: the schedule a replay at a smaller pool would run, on hand-sized traces with a
clock of one second per step (expected times counted step by step in each docstring)."""

from __future__ import annotations

import numpy as np

from kvctl.replay.curve.schedule import Schedule
from kvctl.replay.curve.stream import PageStream
from kvctl.replay.curve.synth import synthesize


def _stream(sizes, outs, arrivals) -> PageStream:
    n = len(sizes)
    return PageStream(page_size=16, keys=np.arange(n, dtype=np.uint64),
                      starts=np.arange(n + 1, dtype=np.int64), matchable=np.zeros(n, dtype=np.int64),
                      prompt_tokens=int(sum(sizes)), arrival_s=np.asarray(arrivals, dtype=float),
                      input_tokens=np.asarray(sizes), output_tokens=np.asarray(outs))


def _recorded(n, skipped=()) -> Schedule:
    admitted = np.zeros(n)
    admitted[list(skipped)] = np.nan
    return Schedule(pool_tokens=0, admitted_s=admitted, prompt_done_s=admitted.copy(),
                    finished_s=admitted.copy(), hit_tokens=np.zeros(n, dtype=np.int64),
                    peak_running=0)


def _run(stream, recorded, pool, max_running=256, chunk=8192):
    return synthesize(stream, recorded, pool_tokens=pool, step_seconds=lambda *_: 1.0,
                      chunk_tokens=chunk, max_running=max_running, clip_tokens=4096)


def test_two_requests_together_when_both_fit_one_after_the_other_when_not():
    """S=16, O=3, both at t=0. Each holds S+O = 19 tokens. Pool 38: both admitted at 0,
    one prefill step (prompt done at 1, first token), two decode steps (finish at 3).
    Pool 37: the second waits for the first's finish at 3, then 3 more steps (4, 6)."""
    stream = _stream([16, 16], [3, 3], [0.0, 0.0])
    both = _run(stream, _recorded(2), pool=38)
    assert list(both.admitted_s) == [0, 0] and list(both.prompt_done_s) == [1, 1]
    assert list(both.finished_s) == [3, 3] and both.peak_running == 2
    alone = _run(stream, _recorded(2), pool=37)
    assert list(alone.admitted_s) == [0, 3] and list(alone.prompt_done_s) == [1, 4]
    assert list(alone.finished_s) == [3, 6] and alone.peak_running == 1


def test_a_long_prompt_is_chunked_and_later_requests_wait_fcfs():
    """S=20 in 8-token chunks: steps 0-1, 1-2, 2-3 (8, 8, 4 tokens); the third also admits
    the 16-token request behind it (4 tokens at t=2), which needs 8 + 4 more (prompt done
    at 5; no decode step while a prefill runs). Then one decode step for both (O=2, the
    first token came with the prefill): finished at 6."""
    stream = _stream([20, 16], [2, 2], [0.0, 0.0])
    s = _run(stream, _recorded(2), pool=10**9, chunk=8)
    assert list(s.admitted_s) == [0, 2]
    assert s.prompt_done_s[0] == 3 and s.prompt_done_s[1] == 5
    assert s.finished_s[0] == 6 and s.finished_s[1] == 6  # one decode step each, together


def test_the_pool_bounds_what_runs_and_refused_requests_have_no_events():
    """Random trace: at every admission the running requests' S+O (O below the clip) fit
    the pool; admissions are in arrival order; a request larger than the pool and one the
    recorded replay did not run never get events."""
    rng = np.random.default_rng(3)
    n = 60
    sizes = rng.integers(16, 400, n)
    outs = rng.integers(1, 50, n)
    arrivals = np.sort(rng.uniform(0, 30, n))
    pool = 1200
    sizes[7] = pool  # S + O > pool
    stream = _stream(sizes, outs, arrivals)
    s = _run(stream, _recorded(n, skipped=(11,)), pool=pool, max_running=8)
    assert np.isnan(s.admitted_s[[7, 11]]).all() and np.isnan(s.finished_s[[7, 11]]).all()
    ran = ~np.isnan(s.admitted_s)
    assert ran.sum() == n - 2
    assert np.all(np.diff(s.admitted_s[ran]) >= 0) and np.all(s.admitted_s[ran] >= arrivals[ran])
    assert np.all(s.admitted_s[ran] < s.prompt_done_s[ran])
    assert np.all(s.prompt_done_s[ran] <= s.finished_s[ran])
    for t in np.unique(s.admitted_s[ran]):
        running = ran & (s.admitted_s <= t) & (s.finished_s > t)
        assert (sizes[running] + outs[running]).sum() <= pool
        assert running.sum() <= 8
    assert s.peak_running <= 8

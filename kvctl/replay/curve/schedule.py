"""One replay's schedule: when each request was admitted, when its prompt was done, when it
finished, on the replay's virtual clock; and the event order the curve's pass follows.

Read from the replay's `FinishedRecord`s (engine_adapter/embedded/requests.py):

    arrival ──queue_s──> admitted (matched, locked) ──> prompt done (first token) ──> finish
            |<─────────────── ttft_s ──────────────────>|
    admitted = arrival + queue_s     prompt done = arrival + ttft_s     finish = finish_s

A step admits at its start and reports its results at its end, which is the next step's
start: at one instant a step's results (prompts inserted, requests finished) come before
the next step's admissions (scheduled.py: PROMPT, FINISH, MATCH). Times are rounded to
ROUND_S so the sums above compare equal where the clock was equal. A request with no
record (refused at SGLang's door) has no events: it is never matched, its pages never
enter the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvctl.replay.curve.scheduled import FINISH, MATCH, PROMPT, REFRESH

ROUND_S = 1e-7  # far below a step (milliseconds), far above float error on an hour's clock


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Per request (trace order), float64 seconds; NaN where the request has no record."""

    pool_tokens: int  # the pool of the replay that ran it
    admitted_s: np.ndarray
    prompt_done_s: np.ndarray
    finished_s: np.ndarray
    hit_tokens: np.ndarray  # int64, the replay's own hit per request (0 without a record)
    peak_running: int  # the most requests ever between admission and finish at once
    # SGLang's waiting-prefix refresh (fcfs + lru, every 32nd round): when, and which
    # waiting requests (queue position 0 = the head), one row per request touched
    refresh_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    refresh_request: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    refresh_position: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def events(self) -> tuple[np.ndarray, np.ndarray]:
        """(kinds, requests): every scheduled request's MATCH, PROMPT and FINISH in the
        order the replay ran them (by time; at one instant PROMPT, FINISH, then MATCH;
        then by request, which is arrival order, as an fcfs batch is)."""
        done = ~np.isnan(self.admitted_s)
        index = np.flatnonzero(done)
        times = np.concatenate([self.admitted_s[index], self.prompt_done_s[index],
                                self.finished_s[index], self.refresh_s])
        kinds = np.concatenate([np.repeat(np.array([MATCH, PROMPT, FINISH], dtype=np.int8),
                                          len(index)),
                                np.full(len(self.refresh_s), REFRESH, dtype=np.int8)])
        requests = np.concatenate([np.tile(index, 3), self.refresh_request])
        # a refresh touches the queue from its 128th request back to its head (head last)
        within = np.concatenate([np.tile(index, 3), -self.refresh_position])
        ticks = np.round(times / ROUND_S).astype(np.int64)
        order = np.lexsort((within, kinds, ticks))
        return kinds[order], requests[order]


class ScheduleRecorder:
    """Collects a replay's finished records (`runner.run(on_finished=...)`) into a
    `Schedule` for a stream's requests (matched by request id)."""

    def __init__(self, rids: tuple[str, ...], arrival_s: np.ndarray, pool_tokens: int) -> None:
        self._index = {rid: i for i, rid in enumerate(rids)}
        self._arrival = np.asarray(arrival_s, dtype=np.float64)
        self._pool = pool_tokens
        n = len(rids)
        self._times = np.full((3, n), np.nan)
        self._hits = np.zeros(n, dtype=np.int64)
        self._refreshes: list[tuple[float, int, int]] = []

    def attach(self, engine) -> None:
        """Record SGLang's waiting-prefix refreshes on `engine` (`runner.run(on_engine=...)`):
        its SchedulePolicy touches the first WAITING_QUEUE_PREFIX_MATCH_MAX waiting prefixes
        every WAITING_PREFIX_REFRESH_INTERVAL-th round (schedule_policy.py
        `_touch_waiting_prefixes`). The probe calls it unchanged, then reads whether its
        counter says it refreshed, and the queue it was given."""
        from sglang.srt.managers import schedule_policy

        policy = engine.prefill.admission.policy
        touch = policy._touch_waiting_prefixes
        every = schedule_policy.WAITING_PREFIX_REFRESH_INTERVAL
        head = schedule_policy.WAITING_QUEUE_PREFIX_MATCH_MAX

        def probe(active, waiting_queue):
            calls = policy._waiting_prefix_refresh_calls
            touch(active, waiting_queue)
            if policy._waiting_prefix_refresh_calls != calls and calls % every == 0:
                now = engine.clock_s
                for position, req in enumerate(waiting_queue[:head]):
                    index = self._index.get(req.rid)
                    if index is not None:
                        self._refreshes.append((now, index, position))

        policy._touch_waiting_prefixes = probe

    def __call__(self, record) -> None:
        index = self._index.get(record.rid)
        if index is None or record.rejected is not None:
            return
        arrival = self._arrival[index]
        self._times[:, index] = (arrival + record.queue_s, arrival + record.ttft_s,
                                 record.finish_s)
        self._hits[index] = record.hit_tokens

    def schedule(self) -> Schedule:
        admitted, prompt, finished = self._times
        rows = np.array(self._refreshes, dtype=np.float64).reshape(-1, 3)
        return Schedule(pool_tokens=self._pool, admitted_s=admitted, prompt_done_s=prompt,
                        finished_s=finished, hit_tokens=self._hits.copy(),
                        peak_running=_peak(admitted, finished), refresh_s=rows[:, 0],
                        refresh_request=rows[:, 1].astype(np.int64),
                        refresh_position=rows[:, 2].astype(np.int64))


def _peak(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) open at once (an end before a start at one instant)."""
    done = ~np.isnan(starts)
    if not done.any():
        return 0
    ticks = np.concatenate([np.round(ends[done] / ROUND_S), np.round(starts[done] / ROUND_S)])
    steps = np.concatenate([-np.ones(done.sum()), np.ones(done.sum())])
    order = np.lexsort((steps, ticks))
    return int(np.cumsum(steps[order]).max())

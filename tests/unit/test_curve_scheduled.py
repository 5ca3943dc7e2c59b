"""The event-ordered pass (kvctl/replay/curve/scheduled.py) on hand-built schedules where
it and the arrival-order pass (distance.py) disagree. Page size 4; a prompt of S = 13
tokens has 3 full pages, all matchable (floor(12/4) = 3); S = 5 has 1 (floor(4/4) = 1);
every request has one output page with a key no prompt uses."""

from __future__ import annotations

import numpy as np
import pytest

from kvctl.replay.curve.distance import COLD, prefix_max, stack_distances
from kvctl.replay.curve.profile import build_curve
from kvctl.replay.curve.schedule import Schedule
from kvctl.replay.curve.scheduled import FINISH, MATCH, PROMPT, event_distances
from kvctl.replay.curve.stream import PageStream

pytestmark = pytest.mark.unit

PAGE = 4


def stream_of(prompts: list[list[int]], sizes: list[int]) -> PageStream:
    """Each request: its prompt's page keys, then one output page (key 1000 + r)."""
    keys, starts = [], [0]
    for r, pages in enumerate(prompts):
        keys += pages + [1000 + r]
        starts.append(len(keys))
    return PageStream(page_size=PAGE, keys=np.asarray(keys, dtype=np.uint64),
                      starts=np.asarray(starts, dtype=np.int64),
                      matchable=np.asarray([(s - 1) // PAGE for s in sizes], dtype=np.int64),
                      prompt_tokens=sum(sizes),
                      full_pages=np.asarray([len(p) for p in prompts], dtype=np.int64))


def schedule_of(admitted, prompt_done, finished) -> Schedule:
    return Schedule(pool_tokens=0, admitted_s=np.asarray(admitted, dtype=float),
                    prompt_done_s=np.asarray(prompt_done, dtype=float),
                    finished_s=np.asarray(finished, dtype=float),
                    hit_tokens=np.zeros(len(admitted), dtype=np.int64), peak_running=0)


def distances(stream: PageStream, schedule: Schedule) -> np.ndarray:
    kinds, requests = schedule.events()
    return event_distances(stream.keys, stream.starts, stream.prompt_pages, stream.matchable,
                           kinds, requests).distances


def test_one_batch_cannot_hit_itself_though_arrival_order_hits():
    """A and B share a 3-page prompt (keys 1, 2, 3) and are admitted in one batch (t=0),
    prompts done at t=1, finished at t=2.

    Arrival order: A inserts o_A, 3, 2, 1 (deepest first), so B looks up 1, 2, 3 at
    distances 0, 1, 2: 3 pages hit from a 3-page pool. Event order: B is matched before A's
    prompt is in the tree; A's pages are A's own, so every page of B is COLD: 0 hits at any
    size, and the curve's ceiling is 0."""
    stream = stream_of([[1, 2, 3], [1, 2, 3]], [13, 13])
    arrival = prefix_max(stack_distances(stream.keys, stream.starts), stream.starts)
    assert arrival[4:7].tolist() == [0, 1, 2]
    schedule = schedule_of([0, 0], [1, 1], [2, 2])
    kinds, requests = schedule.events()
    assert list(zip(kinds.tolist(), requests.tolist())) == [
        (MATCH, 0), (MATCH, 1), (PROMPT, 0), (PROMPT, 1), (FINISH, 0), (FINISH, 1)]
    assert distances(stream, schedule)[4:7].tolist() == [COLD] * 3
    assert build_curve(stream, schedule).ceiling == 0.0
    assert build_curve(stream).ceiling == 12 / 26  # B's 3 pages of 26 prompt tokens


def test_the_next_batch_hits_a_running_prompt_at_distance_zero():
    """Same prompts; B is admitted at t=1, the instant A's prompt is done (a step's results
    come before the next round's admissions), and A still runs. A's pages are in the tree
    and locked: B hits all three at distance 0 (resident while A runs)."""
    stream = stream_of([[1, 2, 3], [1, 2, 3]], [13, 13])
    schedule = schedule_of([0, 1], [1, 2], [3, 4])
    kinds, requests = schedule.events()
    assert list(zip(kinds.tolist(), requests.tolist()))[:3] == [(MATCH, 0), (PROMPT, 0),
                                                               (MATCH, 1)]
    assert distances(stream, schedule)[4:7].tolist() == [0, 0, 0]


def test_a_running_request_takes_room_from_an_older_cached_page():
    """B (keys 5, 6, 7; request 0) is admitted at t=0, its prompt done at t=0.5, and runs
    until t=9. A (key 1, S = 5; request 1) runs from t=1 to t=3. C (key 1; request 2) is
    matched at t=5.

    Arrival order (B, A, C): A's insert is the latest touch of key 1, so C's distance is
    0: a 1-page pool hits. Event order: key 1 is the only unpinned page touched (at A's
    finish, after o_A); B still holds its 3 prompt pages (pinned) and its output page
    (private since its prompt was done): distance 0 + 3 + 1 = 4, a hit from 5 pages up.

    The curve holds from the running requests' peak: B's 3 + 1 and A's 1 pinned + 1 output
    page while both run (t=2..3), 6 pages; below it, the arrival-order estimate (a hit from
    1 page), never above the event order's hits at 6 pages (C's page: 4 of 23 tokens)."""
    stream = stream_of([[5, 6, 7], [1], [1]], [13, 5, 5])
    arrival = prefix_max(stack_distances(stream.keys, stream.starts), stream.starts)
    c = stream.starts[2]
    assert arrival[c] == 0
    schedule = schedule_of([0, 1, 5], [0.5, 2, 6], [9, 3, 7])
    assert distances(stream, schedule)[c] == 4
    curve = build_curve(stream, schedule)
    assert curve.anchor_pages == 6
    assert curve.hit_rate(6 * PAGE) == 4 / 23 and curve.hit_rate(PAGE) == 4 / 23

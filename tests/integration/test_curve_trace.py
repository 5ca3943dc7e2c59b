"""The curve (`kvctl replay --curve`: one unbounded replay's event order, kvctl/replay/curve/
scheduled.py) against exact replays (SGLang's real radix tree and allocator, the embedded
engine) on the shipped trace's first 500 requests, and the live shadow's 1% sample against
the arrival-order curve on the full shipped hour.

The exact replay schedules as SGLang does (SchedulePolicy fcfs, PrefillAdder, up to 256
running): on head_500 the modeled H100 is overloaded and requests queue for 50 to 90 s.
The curve follows one unbounded replay's order (matches at admission, pinned running
pages, same-batch misses, waiting-prefix refreshes), which holds at pools that fit that
replay's running requests (about 4M tokens here); below that a replay at the smaller pool
queues differently, and `--curve`'s rows there follow a schedule synthesized at their pool
(kvctl/replay/curve/synth.py). Bounds, from the issue's target (issue 34: within 1
percentage point), not from a run:

    4M    (event order of the unbounded replay)  |curve - exact| <= 1 pp
    1M, 2M (synthesized schedule at that pool)   |curve - exact| <= 1 pp
    unbounded: the curve's ceiling and the schedule replay's own hit rate, <= 1 pp
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine_adapter.instrument.whatif import POOL_SCALES, WhatIfShadow
from kvctl.replay.curve.profile import build_curve
from kvctl.replay.curve.schedule import ScheduleRecorder
from kvctl.replay.curve.stream import mooncake_stream
from kvctl.replay.curve.synth import synthesized_hit_rate
from kvctl.replay.mooncake import iter_records
from kvctl.replay.runner import ReplaySettings, prepare, run, run_replay

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
HEAD, FULL = TRACES / "head_500.jsonl", TRACES / "conversation_trace.jsonl"

TARGET = 0.01  # issue 34: the curve within 1 percentage point of exact replays
POOLS = (1_000_000, 2_000_000, 4_000_000)
SAMPLED_BOUND = 0.005  # 0.5 percentage points, at every scale (measured: <= 0.13 pp)


@pytest.fixture(scope="module")
def head_curve():
    """The curve as --curve builds it, and the unbounded schedule replay's report."""
    stream = mooncake_stream(HEAD, page_size=16)
    prepared = prepare(ReplaySettings(workload=str(HEAD), pool_tokens=0))
    recorder = ScheduleRecorder(stream.rids, stream.arrival_s, prepared.resolved["pool_tokens"])
    report = run(prepared, on_finished=recorder, on_engine=recorder.attach).report.to_dict()
    schedule = recorder.schedule()
    curve = build_curve(stream, schedule)

    def estimate(pool: int) -> float:  # what --curve prints at `pool` (kvctl/cli/replay_curve.py)
        if pool >= curve.anchor_tokens:
            return curve.hit_rate(pool)
        return synthesized_hit_rate(stream, schedule, prepared.config, pool)

    return curve, report, estimate


def test_curve_ceiling_is_the_unbounded_replay(head_curve):
    """The event-ordered curve at an unbounded pool is the replay it follows: within 1 pp,
    and the schedule holds from a pool at most that replay's own."""
    curve, report, _ = head_curve
    assert abs(curve.ceiling - report["hit_rate"]) <= TARGET
    assert 0 < curve.anchor_tokens <= report["settings"]["pool_tokens"]


@pytest.mark.parametrize("pool", POOLS)
def test_curve_vs_exact_replay_on_head_500(head_curve, pool):
    """`kvctl replay --pool-tokens N` within 1 pp of what --curve prints there (module
    docstring); 4M lies above the schedule's peak (event order), 1M and 2M below it
    (synthesized schedule)."""
    curve, _, estimate = head_curve
    assert (pool >= curve.anchor_tokens) == (pool == 4_000_000)
    report = run_replay(ReplaySettings(workload=str(HEAD), pool_tokens=pool)).report.to_dict()
    assert report["prompt_tokens"] == curve.prompt_tokens
    assert abs(estimate(pool) - report["hit_rate"]) <= TARGET, (
        estimate(pool), curve.hit_rate(pool), report["hit_rate"])


def test_one_percent_shadow_tracks_the_full_curve_on_the_shipped_hour():
    """The plugin's shadow at its default 1% (first 32 pages of each prompt always), fed the
    full trace, is within 0.5 pp of the exact arrival-order pass (the same model, every
    access) at 0.25x .. 8x of the default pool (498,480 tokens), and holds far fewer keys
    than its bound."""
    pool = 498_480
    exact = build_curve(mooncake_stream(FULL, page_size=16))
    shadow = WhatIfShadow(pool_tokens=pool, page_size=16, seed=2026)
    for record in iter_records(FULL):
        shadow.observe_tokens(np.zeros(record.input_length), block_ids=record.hash_ids,
                              output_tokens=record.output_length)
    curve = shadow.curve()
    errors = [p.hit_rate - exact.hit_rate(int(s * pool)) for s, p in zip(POOL_SCALES, curve.points)]
    assert max(abs(e) for e in errors) <= SAMPLED_BOUND, errors
    assert curve.shadow_keys < curve.max_keys and not any(p.capped for p in curve.points)

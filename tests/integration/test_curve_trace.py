"""The one-pass curve against exact replays (SGLang's real radix tree and allocator, the
embedded engine) on the shipped trace, and the live shadow's 1% sample against the full
curve on the full shipped hour.

Why the curve and an exact replay differ (pinned below, head_500 at lru, page 16):
the curve orders every request's touches at its arrival and inserts its output at once;
the replay schedules as SGLang does (SchedulePolicy fcfs, PrefillAdder, no kvctl admission
ceiling) and prefills after queueing (the modeled H100 is overloaded on head_500), pins
running requests' pages, refreshes the waiting requests' prefixes (fcfs + lru, every 32nd
round) and a request's path when it finishes, so a conversation's previous turn is fresher
when its next turn is matched. The replay therefore keeps more of the long multi-turn
prefixes near the knee of the curve: the curve is 1.40 pp below the replay at 2M tokens and
0.62 pp below at 4M. Measured when the replay moved to SGLang's scheduler (issue 29), against
the replay before it (kvctl's own admission, tau_high on): at 2M hit tokens 500,304 ->
596,144, evictions 733 -> 622, mean token usage 0.77 -> 0.82, admission deferrals 539 -> 0;
at 4M 1,132,736 -> 1,151,680, evictions 368 -> 306, mean token usage 0.54 -> 0.66: the
pool stays fuller and evicts less under SGLang's admission, and the curve is unchanged. At
small pools only the shared system-prompt block hits and the two agree within 1,712 tokens
(0.02 pp; 300k and 1M unchanged by the scheduler).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine_adapter.instrument.whatif import POOL_SCALES, WhatIfShadow
from kvctl.replay.curve.profile import build_curve
from kvctl.replay.curve.stream import mooncake_stream
from kvctl.replay.mooncake import iter_records
from kvctl.replay.runner import ReplaySettings, run_replay

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
HEAD, FULL = TRACES / "head_500.jsonl", TRACES / "conversation_trace.jsonl"

# pool tokens -> (curve hit tokens, exact replay hit tokens) of 7,124,855 prompt tokens
PINNED = {
    300_000: (255_488, 254_976),
    1_000_000: (293_824, 295_536),
    2_000_000: (496_064, 596_144),
    4_000_000: (1_107_648, 1_151_680),
}
SAMPLED_BOUND = 0.005  # 0.5 percentage points, at every scale (measured: <= 0.13 pp)


@pytest.fixture(scope="module")
def head_curve():
    return build_curve(mooncake_stream(HEAD, page_size=16))


@pytest.mark.parametrize("pool", sorted(PINNED))
def test_curve_vs_exact_replay_on_head_500(head_curve, pool):
    """At 4 pool sizes the curve and `kvctl replay --pool-tokens N` give the pinned hit
    tokens (see the module docstring for why they differ)."""
    curve_hits, exact_hits = PINNED[pool]
    assert round(head_curve.hit_rate(pool) * head_curve.prompt_tokens) == curve_hits
    report = run_replay(ReplaySettings(workload=str(HEAD), pool_tokens=pool)).report.to_dict()
    assert (report["prompt_tokens"], report["hit_tokens"]) == (7_124_855, exact_hits)


def test_one_percent_shadow_tracks_the_full_curve_on_the_shipped_hour():
    """The plugin's shadow at its default 1% (first 32 pages of each prompt always), fed the
    full trace, is within 0.5 pp of the exact one-pass curve at 0.25x .. 8x of the default
    pool (498,480 tokens), and holds far fewer keys than its bound."""
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

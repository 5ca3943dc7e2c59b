"""SGLang's waiting-queue prefix refresh reaches the replay's LRU order.

`SchedulePolicy.calc_priority` (srt/managers/schedule_policy.py `_touch_waiting_prefixes`)
touches the prefixes of waiting requests at every 32nd scheduling round under fcfs + lru
(`SGLANG_ENABLE_WAITING_PREFIX_REFRESH`, on by default), so a prefix that a queued request
will need stays young in LRU order while the request waits. The workload (page 16, pool
48 pages) makes that decide a hit:

    t = 0..29   30 one-page fillers (1 output token): scheduling rounds 1-30
    t = 30      A = X (64 tokens) + 16 private tokens      round 31, cached: 5 pages
    t = 31      B = Y (64 tokens) + 16 private tokens      round 32, cached: 5 pages (A older)
    t = 32      D (64 fresh tokens, 600 outputs), E (16 tokens, 200 outputs), C = X + 16
                round 33 (the 33rd: the refresh touches C's prefix X); D is admitted, E is
                refused by PrefillAdder (NO_TOKEN: D reserves its 600 outputs), C waits
                behind E and is never matched in that round
    D decodes   42 pages of its own leave 6 for the cache: 34 of 40 cached pages are
                evicted, the 30 fillers first, then the least recently used of A and B

With the refresh, B is the least recently used and C later hits all of X (64 tokens);
without it (the variable set to 0), A is, X goes with it, and C hits nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def c_hit_tokens() -> int:
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    engine = EmbeddedEngine(EngineConfig(pool_tokens=768, page_size=16, eviction_policy="lru",
                                         max_context_len=1024, namespace_salt="t"))
    ids = iter(range(1, 1 << 20))

    def fresh(n: int) -> list[int]:
        return [next(ids) for _ in range(n)]

    def submit(rid: str, tokens: list[int], max_new: int, at: float) -> None:
        engine.submit(RequestSpec(rid=rid, tokens=np.asarray(tokens, dtype=np.int64),
                                  max_new_tokens=max_new, arrival_s=at))

    for index in range(30):
        submit(f"filler{index}", fresh(16), 1, float(index))
    x, y = fresh(64), fresh(64)
    submit("A", x + fresh(16), 1, 30.0)
    submit("B", y + fresh(16), 1, 31.0)
    submit("D", fresh(64), 600, 32.0)
    submit("E", fresh(16), 200, 32.0)
    submit("C", x + fresh(16), 1, 32.0)
    records = {r.rid: r for r in engine.run_until_idle()}
    engine.check_integrity()
    assert records["B"].hit_tokens == 0 and records["E"].hit_tokens == 0
    return records["C"].hit_tokens


def test_waiting_prefix_refresh_keeps_a_queued_prefix_young(monkeypatch):
    """With SGLang's refresh on (its default), C keeps its 64-token prefix."""
    monkeypatch.delenv("SGLANG_ENABLE_WAITING_PREFIX_REFRESH", raising=False)
    assert c_hit_tokens() == 64


def test_without_the_refresh_lru_evicts_the_queued_prefix(monkeypatch):
    """With the refresh off, the same workload evicts X before C runs: no hit."""
    monkeypatch.setenv("SGLANG_ENABLE_WAITING_PREFIX_REFRESH", "0")
    assert c_hit_tokens() == 0

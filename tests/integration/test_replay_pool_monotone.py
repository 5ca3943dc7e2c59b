"""Under LRU, the token hit rate never falls as the pool grows (shipped Mooncake trace).

Slice: the first 150 requests (2,139,452 prompt tokens). Their deeper (beyond block 0)
reuses come back after 1.17M, 1.89M and 2.07M tokens of other traffic, so the pool sizes
below straddle them: 1.0M keeps only the shared first block, 1.25M adds the first reuse,
2.0M all of them, and the unbounded pool (2,196,448 tokens, the slice's demand) can add
nothing more. The unbounded figure is the direct computation (97,792) minus the 512-token
in-flight gap of line 2 (see test_replay_fidelity.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRACE = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl")
SLICE = 150
POOLS = (1_000_000, 1_250_000, 2_000_000, 0)


def test_lru_hit_rate_is_non_decreasing_in_pool_size():
    """Hit tokens 75,776 <= 82,432 <= 97,280 = 97,280 for pools 1.0M, 1.25M, 2.0M, unbounded
    (82,432 at 1.25M since SGLang's PrefillAdder admits: its reservation changes which
    requests overlap);
    evictions fall to zero; every run passes the integrity check."""
    from kvctl.replay.runner import ReplaySettings, run_replay

    docs = [run_replay(ReplaySettings(workload=TRACE, limit=SLICE, pool_tokens=pool,
                                      eviction_policy="lru")).report.to_dict() for pool in POOLS]
    hits = [d["hit_tokens"] for d in docs]
    rates = [d["hit_rate"] for d in docs]
    assert hits == [75_776, 82_432, 97_280, 97_280]
    assert all(a <= b for a, b in zip(rates, rates[1:]))
    assert docs[-1]["evictions"] == 0 and docs[0]["evictions"] > 0
    assert all(d["integrity_ok"] for d in docs)
    assert docs[-1]["settings"]["pool_tokens"] == 2_196_448

"""The roofline clock prices SGLang's HiCache load-back (engine_adapter/embedded/cost_model.py).

Real SGLang objects throughout (the engine's UnifiedRadixCache with `init_hicache`, SGLang's
PrefillAdder doing the load-back, SGLang's load acks). The workload of
test_embedded_hicache.py, spaced out so every request runs alone on an idle engine: eight
distinct 60-token prompts, then the same eight again, 100 s apart, on a 256-token device pool
(page 4, ratio 2). Every second-round prompt loads its 56 page-aligned tokens back from host
and computes the other 4. A request's prefill step therefore starts at its arrival, and its
TTFT is that one step's modeled time.

With a host link of 8 tokens' K/V per second (131,072 B per token, the modeled Llama-3-8B's),
a 56-token load takes exactly 7 s, far above the step's compute and weight-streaming bounds,
so the rule max(compute, memory, load) + overhead gives 7 s + 0.5 ms.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration

PROMPT, PROMPTS, MATCHED, GAP_S = 60, 8, 56, 100.0
KV_BYTES = 131_072
SLOW_LINK = KV_BYTES * 8.0  # bytes/s: 8 tokens' K/V per second
OVERHEAD_S = 0.0005
WEIGHTS_S = 8.03e9 * 2.0 / (3.35e12 * 0.80)  # the step's memory bound: weights over HBM


def replay(ratio: float | None, link: float, *, exact: bool = False):
    """Run the two rounds (`exact`: SGLang's ScheduleBatch path); returns (engine, step
    reports, finished records by rid)."""
    from engine_adapter.embedded.config import CostParams, EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    engine = EmbeddedEngine(EngineConfig(
        pool_tokens=256, page_size=4, kv_pool="mha", max_running_requests=8,
        max_context_len=512, token_budget=256, max_prefill_tokens=256, hicache_ratio=ratio,
        whatif_rate=0, exact_batches=exact, cost=CostParams(host_link_bandwidth=link)))
    for n in range(2 * PROMPTS):
        engine.submit(RequestSpec(rid=f"r{n // PROMPTS}-{n % PROMPTS}",
                                  tokens=np.arange(1, PROMPT + 1) + 1000 * (n % PROMPTS),
                                  max_new_tokens=2, arrival_s=GAP_S * n))
    reports = []
    while engine.has_work():
        reports.append(engine.step())
    engine.settle_transfers()
    finished = {rec.rid: rec for report in reports for rec in report.finished}
    return engine, reports, finished


def test_a_load_back_step_takes_the_transfer_time_when_it_exceeds_the_forward():
    """Each second-round request loads 56 tokens: its prefill step (its TTFT) is
    56 * 131,072 B / (8 * 131,072 B/s) = 7 s, plus the step overhead."""
    _engine, reports, finished = replay(2.0, SLOW_LINK)
    loads = [(r.prefill_tokens, r.loaded_tokens) for r in reports if r.loaded_tokens]
    assert loads == [(PROMPT - MATCHED, MATCHED)] * PROMPTS
    for i in range(PROMPTS):
        assert finished[f"r1-{i}"].ttft_s == pytest.approx(7.0 + OVERHEAD_S, abs=1e-9)
        assert finished[f"r0-{i}"].ttft_s == pytest.approx(WEIGHTS_S + OVERHEAD_S, abs=1e-9)


def test_the_priced_load_tokens_are_sglangs_acked_load_back_tokens():
    """The steps priced exactly the tokens SGLang's load acks count (the reader's
    load_back_tokens, 8 x 56 = 448), and the hits are the unpriced run's."""
    engine, reports, finished = replay(2.0, SLOW_LINK)
    _fast_engine, _fast_reports, fast_finished = replay(2.0, 64e9)
    snap = engine.snapshot()
    assert sum(r.loaded_tokens for r in reports) == snap.hicache.loaded_tokens == 448
    assert ({rid: rec.hit_tokens for rid, rec in finished.items()}
            == {rid: rec.hit_tokens for rid, rec in fast_finished.items()})
    assert sum(rec.hit_tokens for rec in finished.values()) == 448


def test_the_exact_batches_path_prices_the_same_loads():
    """SGLang's ScheduleBatch path (ready_to_load_host_cache between init_new and
    prepare_for_extend) reports the same loads and clocks as the direct path."""
    _engine, direct, _finished = replay(2.0, SLOW_LINK)
    _engine, exact, _finished = replay(2.0, SLOW_LINK, exact=True)
    assert [(r.loaded_tokens, r.clock_s) for r in exact] == [
        (r.loaded_tokens, r.clock_s) for r in direct]
    assert sum(r.loaded_tokens for r in exact) == PROMPTS * MATCHED


def test_a_fast_link_hides_the_load_under_the_forward():
    """At the default 64 GB/s the 56-token load (0.11 ms) overlaps the step's 6 ms weight
    stream: the load-back step costs what a step without a load costs."""
    _engine, _reports, finished = replay(2.0, 64e9)
    assert len(finished) == 2 * PROMPTS
    assert [rec.ttft_s for rec in finished.values()] == pytest.approx(
        [WEIGHTS_S + OVERHEAD_S] * 2 * PROMPTS, abs=1e-9)


def test_without_hicache_the_host_link_prices_nothing():
    """Without HiCache nothing is loaded back: every step and TTFT is the same at the slow
    and the default host link, and the second round recomputes (no hits)."""
    _engine, slow_reports, slow = replay(None, SLOW_LINK)
    _engine, fast_reports, fast = replay(None, 64e9)
    assert [r.clock_s for r in slow_reports] == [r.clock_s for r in fast_reports]
    assert sum(r.loaded_tokens for r in slow_reports) == 0
    assert {rid: rec.ttft_s for rid, rec in slow.items()} == {
        rid: rec.ttft_s for rid, rec in fast.items()}
    assert sum(rec.hit_tokens for rec in slow.values()) == 0

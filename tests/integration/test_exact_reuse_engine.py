"""Exact reuse through the whole embedded engine, with real K/V in SGLang's pool.

The engine runs kvctl's tiny transformer on exactly the slots SGLang's allocator hands out
and attends through SGLang's `req_to_token`; a prefix hit therefore skips computing the
prefix for real. Reuse must not change a single logit (fp32 K/V, bound 1e-6).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.engine import EmbeddedEngine
from engine_adapter.embedded.requests import RequestSpec

pytestmark = pytest.mark.integration

TINY = str(Path(__file__).resolve().parents[1] / "fixtures" / "tiny_llama" / "config.json")
SHARED = np.arange(5, 400) % 997 + 1  # 395 tokens, folded into the tiny vocabulary


def _engine(**overrides) -> EmbeddedEngine:
    fields = dict(pool_tokens=4096, page_size=16, kv_pool="mha", tiny_model=TINY,
                  token_budget=256, max_context_len=2048)
    fields.update(overrides)
    return EmbeddedEngine(EngineConfig(**fields))


def _logits(engine: EmbeddedEngine, rid: str) -> torch.Tensor:
    return torch.stack(engine.model.logits[rid])


def test_prefix_hit_gives_the_logits_of_a_full_recompute():
    """B shares 384 page-aligned tokens with A: with the cache it computes only its suffix,
    yet every logit (prefill and each greedy decode step) equals B computed alone."""
    a = RequestSpec(rid="a", tokens=np.concatenate([SHARED, [7, 8, 9]]), max_new_tokens=6)
    b = RequestSpec(rid="b", tokens=np.concatenate([SHARED, [11, 12, 13, 14]]), max_new_tokens=6, arrival_s=1.0)
    warm = _engine()
    warm.submit(a)
    warm.submit(b)
    finished = {f.rid: f for f in warm.run_until_idle()}
    cold = _engine()
    cold.submit(b)
    alone = cold.run_until_idle()[0]
    assert finished["b"].hit_tokens == 384 and alone.hit_tokens == 0
    diff = (_logits(warm, "b") - _logits(cold, "b")).abs().max().item()
    assert diff <= 1e-6, f"max abs logit diff {diff}"
    assert list(finished["b"].output_ids) == list(alone.output_ids)
    warm.check_integrity()


def test_reload_from_the_host_tier_gives_the_logits_of_a_recompute():
    """Turn 1 offloads its K/V (real bytes), the device copy is flushed, and turn 2 reloads
    it from the host tier instead of recomputing: its logits equal a cold recompute."""
    turn1 = RequestSpec(rid="s.t1", tokens=SHARED.copy(), max_new_tokens=5, session="s",
                        retention="offload", last_turn=False)
    engine = _engine()
    engine.submit(turn1)
    first = engine.run_until_idle()[0]
    assert engine.flush_cache() > 0
    prompt2 = np.concatenate([SHARED, first.output_ids, [21, 22, 23]])
    turn2 = RequestSpec(rid="s.t2", tokens=prompt2, max_new_tokens=5, session="s",
                        arrival_s=first.finish_s + 1.0)
    engine.submit(turn2)
    second = engine.run_until_idle()[0]
    snap = engine.snapshot()
    assert snap.counters.reloaded_tokens > 0 and second.hit_tokens == snap.counters.reloaded_tokens
    cold = _engine()
    cold.submit(turn2)
    alone = cold.run_until_idle()[0]
    diff = (_logits(engine, "s.t2") - _logits(cold, "s.t2")).abs().max().item()
    assert diff <= 1e-6, f"max abs logit diff {diff}"
    assert list(second.output_ids) == list(alone.output_ids)

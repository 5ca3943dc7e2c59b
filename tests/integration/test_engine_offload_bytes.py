"""Offload and reload move real K/V bytes through SGLang's `MHATokenToKVPool`.

With `EngineConfig(kv_pool="mha", tiny_model=...)` the tiny transformer writes real K/V
into SGLang's pool. A session's turn 1 is offloaded to the host tier, its device pages are
evicted, and every K/V buffer of the pool is then poisoned with NaN (as if the freed pages
had been reused). Turn 2 must reload the 304 offloaded rows bit for bit into its new slots
and, attending over them, produce the same logits as a full recompute.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec

pytestmark = pytest.mark.integration

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_llama" / "config.json"
TURN1 = np.arange(1, 301)
OBSERVATION = np.arange(500, 540)
PUBLISHED = 304  # 300 prompt + 5 outputs - 1 (last output has no K/V), page aligned at 16


def _tiny_engine(make_engine):
    return make_engine(kv_pool="mha", tiny_model=str(TINY), pool_tokens=1024, max_context_len=1024)


def _rows(engine, tokens, length: int, label: str):
    """(K, V) per layer of the first `length` cached rows of `tokens` in namespace `label`,
    read through SGLang's own match (device indices) and pool buffers."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    sg = engine.sglang_components()
    tree, pool = sg.tree_cache, sg.kv_pool
    key = RadixKey(token_ids=array("q", [int(t) for t in tokens]), extra_key=f"gen{engine.generation}",
                   cache_salt=label)
    match = tree.match_prefix(MatchPrefixParams(key=key))
    assert match.device_prefix_len >= length
    root = tree.root_node_handle(key.extra_key)
    path = tree.tree_core.collect_full_device_indices(match.last_device_node, root)
    slots = path[:length].to(torch.int64)
    return ([pool.get_key_buffer(i)[slots].clone() for i in range(pool.layer_num)],
            [pool.get_value_buffer(i)[slots].clone() for i in range(pool.layer_num)])


def _turn1(engine):
    engine.submit(RequestSpec(rid="t1", tokens=TURN1, max_new_tokens=5, session="s",
                              retention="offload", last_turn=False))
    (record,) = engine.run_until_idle()
    return record, np.concatenate([TURN1, record.output_ids, OBSERVATION])


def test_reloaded_rows_equal_the_offloaded_rows_bit_for_bit(make_engine):
    """The 304 rows turn 2 reloads are byte-identical to turn 1's, in every layer, K and V,
    although every pool buffer was overwritten with NaN after eviction."""
    import torch

    engine = _tiny_engine(make_engine)
    record, turn2 = _turn1(engine)
    (offloaded,) = [r for r in engine.snapshot().requests if r.state == "offloaded"]
    label = offloaded.namespace  # the hashed namespace label is SGLang's cache_salt
    ref_k, ref_v = _rows(engine, turn2, PUBLISHED, label)
    assert engine.flush_cache() == PUBLISHED
    pool = engine.sglang_components().kv_pool
    for layer in range(pool.layer_num):
        pool.get_key_buffer(layer).fill_(float("nan"))
        pool.get_value_buffer(layer).fill_(float("nan"))
    engine.submit(RequestSpec(rid="t2", tokens=turn2, max_new_tokens=3, session="s",
                              arrival_s=record.finish_s + 1.0))
    (finished,) = engine.run_until_idle()
    assert finished.hit_tokens == PUBLISHED
    assert engine.snapshot().counters.reloaded_tokens == PUBLISHED
    got_k, got_v = _rows(engine, turn2, PUBLISHED, label)
    for layer in range(pool.layer_num):
        assert torch.equal(got_k[layer], ref_k[layer]), f"K layer {layer}"
        assert torch.equal(got_v[layer], ref_v[layer]), f"V layer {layer}"


def test_turn_after_reload_matches_a_full_recompute(make_engine):
    """Turn 2's logits after a host-tier reload equal those of the same prompt computed
    from scratch on a fresh engine (max |diff| <= 1e-6, identical greedy tokens)."""
    import torch

    engine = _tiny_engine(make_engine)
    record, turn2 = _turn1(engine)
    engine.flush_cache()
    engine.submit(RequestSpec(rid="t2", tokens=turn2, max_new_tokens=3, session="s",
                              arrival_s=record.finish_s + 1.0))
    (reloaded,) = engine.run_until_idle()
    reloaded_logits = torch.stack(engine.model.logits["t2"])
    assert reloaded.hit_tokens == PUBLISHED

    fresh = _tiny_engine(make_engine)
    fresh.submit(RequestSpec(rid="t2", tokens=turn2, max_new_tokens=3))
    (recomputed,) = fresh.run_until_idle()
    assert recomputed.hit_tokens == 0
    fresh_logits = torch.stack(fresh.model.logits["t2"])
    assert np.array_equal(reloaded.output_ids, recomputed.output_ids)
    assert float((reloaded_logits - fresh_logits).abs().max()) <= 1e-6

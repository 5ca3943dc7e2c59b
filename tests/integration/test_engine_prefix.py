"""Prefix reuse through the embedded engine, with the exact lengths of seed 000 0x07A-0x07E.

Every engine here is SGLang 0.5.23's real stack (UnifiedRadixCache, paged allocator, pools,
`Req`), driven by kvctl's scheduler loop. For a logits-producing request SGLang caps the
match at S_prompt - 1 and returns whole pages (seed 000 0x07A):

    S_runtime = P * floor(min(S_sem, S_indexed, S_prompt - 1) / P)

A finished request publishes its committed K/V page-floored: prompt + outputs - 1 rows
(the last output token has no K/V yet).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec
from engine_adapter.funnel import REJECTION_REASONS

pytestmark = pytest.mark.integration


def _run(engine, rid: str, tokens, max_new: int = 4, **fields):
    """Submit one request now and run the engine idle; returns its FinishedRecord."""
    engine.submit(RequestSpec(rid=rid, tokens=np.asarray(tokens, dtype=np.int64),
                              max_new_tokens=max_new, arrival_s=engine.clock_s, **fields))
    records = {r.rid: r for r in engine.run_until_idle()}
    engine.check_integrity()
    return records[rid]


def _rejections(engine) -> dict[str, tuple[int, int]]:
    return {b.reason: (b.requests, b.tokens) for b in engine.snapshot().funnel.rejections}


def test_shared_page_aligned_prefix_is_reused_in_full(make_engine):
    """A second request sharing a 288-token (18-page) system prefix reuses all 288 tokens."""
    engine = make_engine(page_size=16)
    system = np.arange(1, 289)
    first = _run(engine, "a", np.concatenate([system, np.arange(10_000, 10_050)]))
    second = _run(engine, "b", np.concatenate([system, np.arange(20_000, 20_070)]))
    assert (first.hit_tokens, second.hit_tokens) == (0, 288)


def test_full_prompt_repeat_is_capped_at_prompt_minus_one(make_engine):
    """seed 000 0x07E: P=16, S_prompt=48, all 48 cached -> S_cap=47, S_runtime=32,
    S_recompute=16 (the logits cap costs a whole page)."""
    engine = make_engine(page_size=16)
    prompt = np.arange(1, 49)
    _run(engine, "warm", prompt, max_new=2)  # commits 49 rows, publishes 48
    assert engine.snapshot().ledger.evictable_tokens == 48
    repeat = _run(engine, "repeat", prompt)
    assert repeat.hit_tokens == 32
    lengths = engine.snapshot().funnel.lengths
    assert (lengths.prompt, lengths.cap, lengths.runtime) == (96, 94, 32)
    assert lengths.recompute == 96 - 32


def test_repeat_of_a_long_prompt_reuses_floor_of_cap(make_engine):
    """seed 000 0x07A: a 358-token prompt repeated reuses 16 * floor(357 / 16) = 352."""
    engine = make_engine(page_size=16)
    prompt = np.concatenate([np.arange(1, 289), np.arange(20_000, 20_070)])
    _run(engine, "first", prompt)
    assert _run(engine, "again", prompt).hit_tokens == 352


def test_first_differing_token_ends_the_hit_at_its_page(make_engine):
    """seed 000 0x07B: changing token position 37 of a cached 64-token prompt leaves the two
    complete ancestor pages (32 rows) reusable at P=16."""
    engine = make_engine(page_size=16)
    prompt = np.arange(1, 65)
    _run(engine, "base", prompt)
    changed = prompt.copy()
    changed[37] = 999_999
    assert _run(engine, "changed", changed).hit_tokens == 32


@pytest.mark.parametrize(
    ("page", "hit_total", "recompute_total"),
    [(4, 36, 5), (8, 32, 9), (16, 16, 25), (32, 0, 41), (64, 0, 41)],
)
def test_block_size_staircase_for_generative_requests(make_engine, page, hit_total, recompute_total):
    """seed 000 0x09C: A's 33-token path is cached; exact-prefix requests B (25) and C (16)
    reuse P*floor((T-1)/P): 36, 32, 16, 0, 0 tokens in total at P = 4, 8, 16, 32, 64, and
    recompute 5, 9, 25, 41, 41."""
    engine = make_engine(page_size=page, pool_tokens=2048, token_budget=1024)
    path = np.arange(1, 34)
    _run(engine, "A", path, max_new=1)
    b = _run(engine, "B", path[:25])
    c = _run(engine, "C", path[:16])
    assert b.hit_tokens + c.hit_tokens == hit_total
    assert (25 - b.hit_tokens) + (16 - c.hit_tokens) == recompute_total


def test_unauthorized_namespace_is_refused_before_the_tree_is_consulted(make_engine):
    """A tenant reading a namespace it may not read gets zero hit although the content is
    cached there; SGLang's match_prefix is not called for it; the funnel counts it in
    unauthorized_namespace with its S_cap tokens."""
    engine = make_engine(authorized={"acme": ("public",)})
    prompt = np.arange(1, 201)
    _run(engine, "writer", prompt, tenant="acme", namespace="public")
    tree = engine.sglang_components().tree_cache
    calls = []
    original = tree.match_prefix

    def counting(params, *args, **kwargs):
        calls.append(params)
        return original(params, *args, **kwargs)

    tree.match_prefix = counting
    refused = _run(engine, "intruder", prompt, tenant="globex", namespace="public")
    assert refused.hit_tokens == 0
    assert calls == []  # the tree was never asked
    assert _rejections(engine)["unauthorized_namespace"] == (1, 199)
    tree.match_prefix = original


def test_authorized_reader_hits_the_shared_namespace(make_engine):
    """The same content read by a tenant authorized for the namespace is reused: 192 of 200."""
    engine = make_engine(authorized={"acme": ("public",), "initech": ("public",)})
    prompt = np.arange(1, 201)
    _run(engine, "writer", prompt, tenant="acme", namespace="public")
    reader = _run(engine, "reader", prompt, tenant="initech", namespace="public")
    assert reader.hit_tokens == 192


def test_other_tenants_content_is_never_reused(make_engine):
    """Identical tokens cached by another tenant's namespace give zero hit; the funnel puts
    the request in incompatible_namespace (S_any > 0, S_ns == 0)."""
    engine = make_engine()
    prompt = np.arange(1, 201)
    _run(engine, "acme-1", prompt, tenant="acme")
    other = _run(engine, "globex-1", prompt, tenant="globex")
    assert other.hit_tokens == 0
    assert _rejections(engine)["incompatible_namespace"] == (1, 192)


def test_generation_bump_makes_cached_entries_stale(make_engine):
    """After a model-weight update the cached prefix never hits: zero hit, one request in
    stale_generation with the 192 tokens the old generation held."""
    engine = make_engine()
    prompt = np.arange(1, 201)
    _run(engine, "before", prompt)
    assert engine.bump_generation() == 1
    after = _run(engine, "after", prompt)
    assert after.hit_tokens == 0
    assert _rejections(engine)["stale_generation"] == (1, 192)
    again = _run(engine, "after-again", prompt)
    assert again.hit_tokens == 192  # the new generation's own entry is reusable


def test_forks_share_the_parent_prefix_under_one_locked_node(make_engine):
    """Three tree-of-thought children of a finished 200+4-token parent each reuse its 192
    published tokens; while they run, the shared node's lock_ref is 3 and SGLang's recorded
    count equals the three leases kvctl derives."""
    engine = make_engine()
    parent = _run(engine, "parent", np.arange(1, 201))
    base = np.concatenate([np.arange(1, 201), parent.output_ids])
    for k in range(3):
        thought = np.arange(7_000 + 100 * k, 7_016 + 100 * k)
        engine.submit(RequestSpec(rid=f"child{k}", tokens=np.concatenate([base, thought]),
                                  max_new_tokens=6, arrival_s=engine.clock_s))
    engine.step()
    snap = engine.check_integrity()
    shared = [n for n in snap.tree_nodes if n.parent_id is None and n.tokens == 192]
    assert len(shared) == 1
    assert shared[0].recorded_lock_ref == shared[0].derived_lock_ref == 3
    assert shared[0].holders == ("child0", "child1", "child2")
    hits = {r.rid: r.hit_tokens for r in engine.run_until_idle()}
    assert hits == {"child0": 192, "child1": 192, "child2": 192}


def test_every_rejection_bucket_is_named_in_the_funnel(make_engine):
    """A fresh engine's funnel is observable, zero and monotone, with one bucket per stage."""
    snap = make_engine().snapshot()
    assert [b.reason for b in snap.funnel.rejections] == list(REJECTION_REASONS)
    assert all(s.requests == 0 and s.tokens == 0 for s in snap.funnel.stages)
    assert snap.funnel.is_monotone() and snap.hit_rate is None

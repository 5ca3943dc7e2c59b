"""Prompt page hashes and the affinity-load objective (engine_adapter/remote/routing.py).

Worked numbers from seed 003 figure 7 ("Cluster-Scale Prefix Trie Routing"): a prompt of
S = 40,000 tokens in 16-token chunks; Worker 1 retains 32,000 cached prefix tokens (an 80%
hit), skips 2,000 chunk allocations and prefills the remaining 8,000 tokens. The seed
gives no values for mu, gamma or the loads; the tests below state theirs.
"""

from __future__ import annotations

import pytest

from engine_adapter.remote.event_mirror import PrefixMirror
from engine_adapter.remote.routing import Candidate, choose_worker, page_hashes
from engine_adapter.remote.wire import StoredBlocks

pytestmark = pytest.mark.unit


def test_hashes_match_sglang_recorded_vector():
    """[1..12] at page 4: the three hashes SGLang 0.5.23's get_hash_str + hash_str_to_int64
    give (recorded; tests/integration/test_remote_events.py re-checks live)."""
    assert page_hashes(list(range(1, 13)), 4) == (
        -3488128144981237669,
        5674439469042975057,
        -1307369107475853156,
    )


def test_salted_hashes_match_sglang_published_events():
    """cache_salt "s1" seeds the chain: the hashes a real UnifiedRadixCache published."""
    assert page_hashes(list(range(1, 9)), 4, cache_salt="s1") == (
        8751685944416650314,
        5408712977347781210,
    )


def test_partial_last_page_is_not_hashed():
    """Only full pages are cached, so 10 tokens at page 4 give 2 hashes."""
    assert len(page_hashes(list(range(10)), 4)) == 2


def test_wide_tokens_hash_differently():
    """A token >= 2**32 switches the page to SGLang's wide encoding."""
    assert page_hashes([2**32, 1], 2) != page_hashes([0, 1], 2)


def test_dynamo_format_namespaces_salted_hashes():
    """The dynamo format re-hashes each block with the (extra_key, cache_salt) namespace."""
    default = page_hashes(list(range(8)), 4, cache_salt="t")
    dynamo = page_hashes(list(range(8)), 4, cache_salt="t", dynamo_format=True)
    assert len(dynamo) == 2 and set(default).isdisjoint(dynamo)


def test_dynamo_format_without_namespace_is_unchanged():
    """No extra_key and no salt: dynamo hashes equal the default ones."""
    assert page_hashes(list(range(8)), 4, dynamo_format=True) == page_hashes(list(range(8)), 4)


def test_seed003_figure7_worked_route():
    """seed 003 fig. 7: S = 40,000, B = 16, Worker 1 caches 32,000 tokens -> it wins with an
    80% hit, skips 2,000 pages and prefills 8,000 tokens (equal loads, mu 0.5, gamma 1)."""
    prompt = [(i * 7919) % 50_000 for i in range(40_000)]
    hashes = page_hashes(prompt, 16)
    worker1 = PrefixMirror()
    worker1.apply(
        StoredBlocks(
            block_hashes=hashes[:2_000],
            parent_block_hash=None,
            block_tokens=(16,) * 2_000,
            medium="GPU",
        )
    )
    worker2 = PrefixMirror()
    worker2.apply(
        StoredBlocks(
            block_hashes=hashes[:500],
            parent_block_hash=None,
            block_tokens=(16,) * 500,
            medium="GPU",
        )
    )
    candidates = [
        Candidate(name="worker-1", matched_tokens=worker1.match(hashes).tokens, load=4),
        Candidate(name="worker-2", matched_tokens=worker2.match(hashes).tokens, load=4),
    ]
    decision = choose_worker(40_000, 16, candidates)
    assert decision.winner == "worker-1"
    assert decision.winner_score.hit_ratio == 0.8
    assert (decision.skipped_pages, decision.novel_suffix_tokens) == (2_000, 8_000)


def test_objective_values():
    """mu 0.5, gamma 1, L_max 4: score = 0.5 * 0.8 - 0.5 * (4/4) = -0.1 and
    0.5 * 0.2 - 0.5 * (2/4) = -0.15."""
    decision = choose_worker(
        100,
        16,
        [
            Candidate(name="a", matched_tokens=80, load=4),
            Candidate(name="b", matched_tokens=20, load=2),
        ],
    )
    assert [(s.name, round(s.score, 12)) for s in decision.scores] == [("a", -0.1), ("b", -0.15)]


def test_load_dominates_with_small_mu():
    """mu 0.2: an idle worker with no cache (score 0) beats a busy one with 80% cached
    (0.2 * 0.8 - 0.8 * 1 = -0.64)."""
    decision = choose_worker(
        100,
        16,
        [
            Candidate(name="busy", matched_tokens=80, load=8),
            Candidate(name="idle", matched_tokens=0, load=0),
        ],
        mu=0.2,
    )
    assert decision.winner == "idle"
    assert round(decision.scores[1].score, 12) == -0.64


def test_gamma_shapes_the_load_penalty():
    """gamma 2 squares the relative load: (4/8)^2 = 0.25."""
    decision = choose_worker(
        100,
        16,
        [
            Candidate(name="a", matched_tokens=0, load=4),
            Candidate(name="b", matched_tokens=0, load=8),
        ],
        gamma=2.0,
    )
    assert decision.scores[0].load_term == 0.25


def test_ties_prefer_the_longer_match():
    """Equal scores: the worker with more cached tokens wins (mu 0: load only, both idle)."""
    decision = choose_worker(
        100,
        16,
        [
            Candidate(name="a", matched_tokens=16, load=0),
            Candidate(name="b", matched_tokens=48, load=0),
        ],
        mu=0.0,
    )
    assert decision.winner == "b"


def test_unobservable_workers_are_excluded_with_reason():
    """A disconnected worker is listed as excluded, not scored."""
    decision = choose_worker(
        100,
        16,
        [
            Candidate(name="a", matched_tokens=0, load=1),
            Candidate(name="down", matched_tokens=0, load=None, reason="disconnected"),
        ],
    )
    assert ([s.name for s in decision.scores], decision.excluded) == (
        ["a"],
        (("down", "disconnected"),),
    )


def test_no_candidates_no_winner():
    """With every worker excluded there is no winner and no suffix."""
    decision = choose_worker(10, 4, [Candidate(name="x", matched_tokens=0, load=None)])
    assert (decision.winner, decision.novel_suffix_tokens) == (None, None)


@pytest.mark.parametrize("kwargs", [{"mu": 1.5}, {"mu": -0.1}, {"gamma": 0.0}])
def test_bad_parameters_raise(kwargs):
    """mu outside [0, 1] or a non-positive gamma is rejected."""
    with pytest.raises(ValueError):
        choose_worker(10, 4, [], **kwargs)

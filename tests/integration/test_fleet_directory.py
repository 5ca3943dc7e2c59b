"""The central prefix directory, seed 003's affinity objective and the fleet's figures.

Events here are SGLang 0.5.23's own event classes (sglang/srt/mem_cache/events.py), built
by hand in the order a radix cache emits them: a page's BlockStored names its parent.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvctl.errors import InputError
from kvctl.fleet.directory import PrefixDirectory
from kvctl.fleet.loop import Outcome
from kvctl.fleet.report import figures, imbalance, regret_tokens
from kvctl.fleet.routers.affinity import Affinity, affinity_score
from kvctl.fleet.routers.base import RouteRequest
from kvctl.fleet.routers.registry import make_policy

pytestmark = pytest.mark.integration  # imports SGLang (its event classes)

events = pytest.importorskip("sglang.srt.mem_cache.events")


def stored(pages: list[np.ndarray], first_hash: int, parent: int | None = None) -> list:
    """BlockStored per page, chained from `parent`, hashes first_hash, first_hash + 1, ..."""
    out = []
    for i, page in enumerate(pages):
        out.append(events.BlockStored(block_hashes=[first_hash + i], parent_block_hash=parent,
                                      token_ids=[int(t) for t in page], block_size=len(page),
                                      lora_id=None))
        parent = first_hash + i
    return out


def pages_of(tokens: np.ndarray, size: int) -> list[np.ndarray]:
    return [tokens[i:i + size] for i in range(0, len(tokens) // size * size, size)]


class View:
    def __init__(self, loads):
        self._loads = loads

    @property
    def replicas(self):
        return len(self._loads)

    def loads(self):
        return list(self._loads)

    def healthy(self):
        return [True] * len(self._loads)

    def exact_hits(self, request):
        raise AssertionError("affinity must not read the replicas' caches")


def test_seed_003_figure_7_worked_numbers():
    """Seed 003 figure 7: S = 40,000 tokens in 16-token chunks (2,500 fingerprints); worker 1
    retains 32,000 prefix tokens, an 80% hit: 2,000 chunks skipped, 8,000 novel tokens."""
    rng = np.random.default_rng(3)
    prompt = rng.integers(1, 50_000, size=40_000)
    directory = PrefixDirectory(2, 16)
    hashes = directory.chunk_hashes(prompt)
    assert len(hashes) == 2_500
    directory.apply(1, stored(pages_of(prompt[:32_000], 16), first_hash=1))
    match = directory.match(hashes)
    assert match == [0, 32_000]
    assert match[1] // 16 == 2_000 and 40_000 - match[1] == 8_000
    assert match[1] / 40_000 == pytest.approx(0.80)
    # the objective at mu = 0.7, both idle: worker 1 scores 0.7 * 0.8 = 0.56, worker 0 zero
    assert affinity_score(32_000, 40_000, 0, 0, 0.7, 2.0) == pytest.approx(0.56)


def test_fingerprints_are_a_prefix_chain():
    """h_k depends on the whole prefix: equal prefixes, equal hashes; one changed token
    changes its chunk's hash and every later one, and none before."""
    directory = PrefixDirectory(1, 16)
    a = np.arange(1, 161)
    b = a.copy()
    b[50] = 9_999  # in chunk 3 (tokens 48..63)
    ha, hb = directory.chunk_hashes(a), directory.chunk_hashes(b)
    assert len(ha) == 10
    assert (ha[:3] == hb[:3]).all() and (ha[3:] != hb[3:]).all()
    # a prompt's tail shorter than a chunk has no fingerprint
    assert len(directory.chunk_hashes(a[:15])) == 0


def test_pages_larger_than_chunks_and_removal():
    """Pages of 64 tokens feed 16-token chunks (4 each); removing the second page withdraws
    its 4 chunks, so the match stops at the first page (64 tokens)."""
    tokens = np.arange(100, 100 + 256)
    directory = PrefixDirectory(1, 16)
    directory.apply(0, stored(pages_of(tokens, 64), first_hash=10))
    hashes = directory.chunk_hashes(tokens)
    assert directory.match(hashes) == [256]
    assert directory.resident_chunks(0) == 16
    directory.apply(0, [events.BlockRemoved(block_hashes=[11])])
    assert directory.match(hashes) == [64]
    assert directory.resident_chunks(0) == 12
    directory.apply(0, [events.AllBlocksCleared()])
    assert directory.match(hashes) == [0]


def test_a_shared_chunk_survives_one_of_its_two_pages():
    """Two branches share a first page stored twice under different page hashes (as after
    a re-insert): the chunk stays until both copies are removed."""
    tokens = np.arange(1, 33)
    directory = PrefixDirectory(1, 16)
    directory.apply(0, stored([tokens[:16]], first_hash=1))
    directory.apply(0, stored([tokens[:16]], first_hash=2))
    hashes = directory.chunk_hashes(tokens[:16])
    directory.apply(0, [events.BlockRemoved(block_hashes=[1])])
    assert directory.match(hashes) == [16]
    directory.apply(0, [events.BlockRemoved(block_hashes=[2])])
    assert directory.match(hashes) == [0]


def test_a_page_whose_parent_was_never_seen_is_ignored():
    directory = PrefixDirectory(1, 16)
    tokens = np.arange(1, 33)
    directory.apply(0, stored([tokens[16:]], first_hash=5, parent=999))
    assert directory.resident_chunks(0) == 0


def request(tokens: np.ndarray, rid: str = "r") -> RouteRequest:
    return RouteRequest(rid=rid, key=tokens, tokens=tokens, prompt_tokens=len(tokens),
                        arrival_s=0.0)


def test_affinity_trades_match_against_load():
    """Worker 0 holds half the prompt (match 0.5), worker 1 nothing.
    mu = 0.7, gamma = 2, L_max = max load:
      loads (4, 0): w0 = 0.7*0.5 - 0.3*(4/4)^2 = 0.05 > w1 = 0 -> worker 0
      mu = 0.5:     w0 = 0.25 - 0.5 = -0.25 < w1 = 0 -> worker 1
      loads (2, 4), mu 0.5: w0 = 0.25 - 0.5*(0.5)^2 = 0.125 > w1 = -0.5 -> worker 0"""
    tokens = np.arange(1, 129)
    policy = Affinity(2, mu=0.7, gamma=2.0)
    policy.on_kv_events(0, stored(pages_of(tokens[:64], 16), first_hash=1))
    assert policy.select(request(tokens), View([4, 0])) == 0
    half = Affinity(2, mu=0.5, gamma=2.0)
    half.on_kv_events(0, stored(pages_of(tokens[:64], 16), first_hash=1))
    assert half.select(request(tokens), View([4, 0])) == 1
    assert half.select(request(tokens), View([2, 4])) == 0


def test_affinity_ties_go_to_the_lower_load_then_the_lower_index():
    tokens = np.arange(1, 33)
    policy = Affinity(3)
    assert policy.select(request(tokens), View([2, 1, 1])) == 1
    assert policy.select(request(tokens), View([0, 0, 0])) == 0


@pytest.mark.parametrize("options, message", [
    ({"mu": 1.5}, "--mu must be between 0 and 1"),
    ({"gamma": 0.0}, "--gamma must be positive"),
    ({"cache_threshold": 0.3}, "--cache-threshold does not apply to router affinity"),
])
def test_affinity_options_are_checked(options, message):
    with pytest.raises(InputError, match=message):
        make_policy("affinity", replicas=2, options=options)


def outcome(rid, replica, prompt, hit, rejected=None):
    return Outcome(rid=rid, replica=replica, arrival_s=0.0, prompt_tokens=prompt,
                   hit_tokens=hit, ttft_s=0.1, e2e_s=1.0, rejected=rejected)


def test_figures_regret_and_imbalance_by_hand():
    """Replica 0 serves a (100 tokens, 40 hit) and b (300, 0); replica 1 serves c (200, 150);
    d was refused. Fleet hit = 190 / 600. Imbalance by requests: max 2 / mean 1.5 = 4/3;
    by prompt tokens: 400 / 300 = 4/3. The oracle hit a 40, b 120, c 100: regret =
    0 + 120 + 0 = 120 (c's surplus over the oracle does not offset b's shortfall)."""
    ours = [outcome("a", 0, 100, 40), outcome("b", 0, 300, 0), outcome("c", 1, 200, 150),
            outcome("d", 1, 900, 0, rejected="too long")]
    oracle = [outcome("a", 1, 100, 40), outcome("b", 1, 300, 120), outcome("c", 0, 200, 100)]
    figs = figures(ours, 2, oracle)
    assert figs.fleet.hit_rate == pytest.approx(190 / 600)
    assert (figs.fleet.requests, figs.fleet.rejected) == (3, 1)
    assert figs.request_imbalance == pytest.approx(4 / 3)
    assert figs.token_imbalance == pytest.approx(4 / 3)
    assert figs.regret_tokens == 120 == regret_tokens(ours, oracle)
    assert figs.oracle_hit_tokens == 260
    assert [r.requests for r in figs.replicas] == [2, 1]
    assert imbalance([0, 0]) is None and imbalance([5, 5]) == 1.0

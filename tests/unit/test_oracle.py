"""The content oracle: counterfactual prefix lengths S_any, S_ns, S_sem (seed 000 0x07A),
at page granularity, per (namespace, model generation)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded import oracle as oracle_module
from engine_adapter.embedded.oracle import ContentOracle, NullOracle
from engine_adapter.embedded.page_hashes import PageChain, expand_blocks
from tests.support.reference_oracle import ReferenceOracle

pytestmark = pytest.mark.unit

ACME0 = ("acme", 0)
ACME1 = ("acme", 1)
GLOBEX0 = ("globex", 0)
PROMPT = np.arange(1, 101, dtype=np.int64)  # 100 tokens: 6 full pages of 16 + 4


def test_empty_oracle_explains_nothing():
    """Before anything is recorded every length is 0."""
    assert ContentOracle(16).lengths(ACME0, PROMPT, 99) == (0, 0, 0)


def test_recorded_prefix_is_found_page_floored():
    """Recording 100 tokens remembers 6 full pages: the same prompt capped at 99 gets 96."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 100)
    assert oracle.lengths(ACME0, PROMPT, 99) == (96, 96, 96)
    assert oracle.remembered_pages == 6


def test_cap_limits_the_lengths():
    """A cap of 40 admits 2 pages (32 tokens) even though 6 are remembered."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 100)
    assert oracle.lengths(ACME0, PROMPT, 40) == (32, 32, 32)


def test_upto_limits_what_is_recorded():
    """Recording only the first 40 tokens remembers 2 pages."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 40)
    assert oracle.lengths(ACME0, PROMPT, 99) == (32, 32, 32)


def test_first_difference_ends_the_match_at_its_page():
    """seed 000 0x07B: a change at position 37 leaves 2 complete pages (32 tokens)."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 100)
    changed = PROMPT.copy()
    changed[37] = 999_999
    assert oracle.lengths(ACME0, changed, 99) == (32, 32, 32)


def test_other_namespace_counts_only_for_s_any():
    """Content computed by another tenant: S_any 96, S_ns 0, S_sem 0."""
    oracle = ContentOracle(16)
    oracle.record(GLOBEX0, PROMPT, 100)
    assert oracle.lengths(ACME0, PROMPT, 99) == (96, 0, 0)


def test_older_generation_counts_for_s_ns_but_not_s_sem():
    """Content computed by the same namespace under an older model: S_ns 96, S_sem 0."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 100)
    assert oracle.lengths(ACME1, PROMPT, 99) == (96, 96, 0)


def test_lengths_take_the_longest_source():
    """S_any is the max over every key; S_sem only the request's own key."""
    oracle = ContentOracle(16)
    oracle.record(GLOBEX0, PROMPT, 100)
    oracle.record(ACME0, PROMPT, 50)
    assert oracle.lengths(ACME0, PROMPT, 99) == (96, 48, 48)


def test_prefix_of_a_recorded_sequence_matches_regardless_of_its_own_tail():
    """A shorter prompt sharing 3 pages with a recorded one gets 48 tokens."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 100)
    shorter = np.concatenate([PROMPT[:48], np.arange(5_000, 5_030)])
    assert oracle.lengths(ACME0, shorter, len(shorter) - 1) == (48, 48, 48)


def test_queued_records_are_added_before_any_question(monkeypatch):
    """Records only queue their pages; past PENDING_PAGES (here 8) they are added at once,
    and any question (lengths, remembered_pages) adds the rest first."""
    monkeypatch.setattr(oracle_module, "PENDING_PAGES", 8)
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 100)  # 6 pages: queued
    assert oracle._pending and not oracle._seen
    oracle.record(GLOBEX0, PROMPT, 48)  # 9 pages in all: added
    assert not oracle._pending and {k: len(s) for k, s in oracle._seen.items()} == {
        ACME0: 6, GLOBEX0: 3}
    oracle.record(ACME1, PROMPT, 32)
    assert oracle.lengths(ACME1, PROMPT, 99) == (96, 96, 32)
    oracle.record(ACME1, PROMPT, 64, known=32)
    assert oracle.remembered_pages == 6 + 3 + 4


def test_partial_page_is_never_remembered():
    """15 tokens at page 16 leave nothing to reuse."""
    oracle = ContentOracle(16)
    oracle.record(ACME0, PROMPT, 15)
    assert oracle.remembered_pages == 0
    assert oracle.lengths(ACME0, PROMPT, 99) == (0, 0, 0)


def test_hashes_are_stable_across_instances_with_the_same_seed():
    """Two oracles with one seed agree; the oracle is deterministic."""
    a, b = ContentOracle(8, seed=3), ContentOracle(8, seed=3)
    for oracle in (a, b):
        oracle.record(ACME0, PROMPT, 100)
    assert a.lengths(ACME0, PROMPT, 99) == b.lengths(ACME0, PROMPT, 99) == (96, 96, 96)


def test_large_token_ids_near_two_to_the_thirty_one():
    """Synthetic output ids live in [2^30, 2^31): they hash and match like any other."""
    oracle = ContentOracle(4)
    tokens = np.arange(2**31 - 40, 2**31, dtype=np.int64)
    oracle.record(ACME0, tokens, 40)
    assert oracle.lengths(ACME0, tokens, 39) == (36, 36, 36)


def test_long_sequences_grow_the_power_table():
    """A 5,000-token sequence (beyond the initial power table) is hashed correctly."""
    oracle = ContentOracle(16)
    tokens = np.arange(1, 5_001, dtype=np.int64)
    oracle.record(ACME0, tokens, 5_000)
    assert oracle.lengths(ACME0, tokens, 4_999) == (4_992, 4_992, 4_992)
    other = tokens.copy()
    other[4_000] = 0
    assert oracle.lengths(ACME0, other, 4_999) == (4_000, 4_000, 4_000)


def test_block_id_chain_and_plain_tokens_share_one_set():
    """A Mooncake request recorded through its block-id chain (prompt + 40 output ids) is
    found by a later prompt given as plain tokens: 1024 + 32 tokens = 66 pages."""
    oracle = ContentOracle(16)
    prompt = expand_blocks((4, 9), 1030)
    fill = np.concatenate([prompt, np.arange(2**30, 2**30 + 40)])
    oracle.record(ACME0, fill, 1070, chain=PageChain(prompt, (4, 9)))
    assert oracle.lengths(ACME0, fill, 1069) == (1056, 1056, 1056)
    later = prompt[:1024]
    assert oracle.lengths(GLOBEX0, later, 1023, chain=PageChain(later)) == (1008, 0, 0)


def test_null_oracle_remembers_nothing():
    """Instrumentation off: the null oracle records nothing and answers zeros."""
    oracle = NullOracle()
    oracle.record(ACME0, PROMPT, 100)
    assert oracle.lengths(ACME0, PROMPT, 99) == (0, 0, 0)
    assert oracle.remembered_pages == 0


def test_random_call_sequences_equal_the_per_token_reference():
    """400 random record/lengths calls over 6 requests (block-id and token prompts, fills
    growing with output ids, random known/upto/cap, two keys): every answer and the final
    hash sets equal the previous per-token algorithm's (tests/support/reference_oracle.py)."""
    rng = np.random.default_rng(7)
    oracle = ContentOracle(16, seed=5)
    ref = ReferenceOracle(16, int(oracle._hasher.base))
    shared = (1, 2, 3)
    requests = []
    for index in range(6):
        blocks = shared[: index % 4] + tuple(int(b) for b in rng.integers(10, 40, size=2))
        prompt = expand_blocks(blocks, len(blocks) * 512 - int(rng.integers(0, 500)))
        chain = PageChain(prompt, blocks if index % 2 else None)
        requests.append((prompt, chain, [2**30 + 1000 * index]))
    answers = []
    for _ in range(400):
        prompt, chain, out = requests[int(rng.integers(len(requests)))]
        if rng.random() < 0.3:
            out.append(out[-1] + 1)
        fill = np.concatenate([prompt, np.arange(out[0], out[0] + len(out) - 1)])
        key = (ACME0, ACME1)[int(rng.integers(2))]
        upto = int(rng.integers(0, len(fill) + 1))
        if rng.random() < 0.5:
            known = int(rng.integers(0, upto + 1))
            oracle.record(key, fill, upto, known=known, chain=chain)
            ref.record(key, fill, upto, known=known)
        else:
            got = oracle.lengths(key, fill, upto, chain=chain)
            answers.append((got, ref.lengths(key, fill, upto)))
    assert [a for a, b in answers] == [b for a, b in answers]
    assert any(a != (0, 0, 0) for a, _ in answers)
    assert oracle.remembered() == ref._seen


def _paired(page_size: int = 16):
    oracle = ContentOracle(page_size)
    return oracle, ReferenceOracle(page_size, int(oracle._hasher.base))


def test_a_later_record_from_an_earlier_page_adds_the_pages_skipped_before():
    """known=16 skips page 0; a later known=0 record of the same request must add it
    (the chain remembers which pages it added, not which it was told were known)."""
    oracle, ref = _paired()
    prompt = expand_blocks((1, 2), 1024)
    chain = PageChain(prompt, (1, 2))
    for known in (16, 0):
        oracle.record(ACME0, prompt, 640, known=known, chain=chain)
        ref.record(ACME0, prompt, 640, known=known)
    assert oracle.remembered() == ref._seen
    assert oracle.lengths(ACME0, prompt, 1023) == (640, 640, 640)


def test_a_fill_that_left_the_prompt_is_recorded_in_full_again():
    """After the prompt's pages are recorded, a fill that differs at token 5 shares no page
    hash with them: all 40 of its pages are added, none skipped as already recorded."""
    oracle, ref = _paired()
    prompt = expand_blocks((1, 2), 1024)
    chain = PageChain(prompt, (1, 2))
    other = prompt.copy()
    other[5] += 1
    for fill in (prompt, other):
        oracle.record(ACME0, fill, 640, chain=chain)
        ref.record(ACME0, fill, 640)
    assert oracle.remembered() == ref._seen
    assert oracle.remembered_pages == 80

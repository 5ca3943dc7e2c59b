"""The content oracle: counterfactual prefix lengths S_any, S_ns, S_sem (seed 000 0x07A),
at page granularity, per (namespace, model generation)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded.oracle import ContentOracle, NullOracle
from engine_adapter.embedded.page_hashes import PageChain, expand_blocks

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
    assert oracle.lengths(GLOBEX0, prompt[:1024], 1023, chain=PageChain(prompt[:1024])) == (1008, 0, 0)


def test_null_oracle_remembers_nothing():
    """Instrumentation off: the null oracle records nothing and answers zeros."""
    oracle = NullOracle()
    oracle.record(ACME0, PROMPT, 100)
    assert oracle.lengths(ACME0, PROMPT, 99) == (0, 0, 0)
    assert oracle.remembered_pages == 0

"""Page-boundary prefix hashes (engine_adapter/embedded/page_hashes.py): the closed form from
Mooncake block ids, a request's cached chain, and the token path all give the values of
hashing every token (tests/support/reference_oracle.py, the previous algorithm)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_adapter.embedded.page_hashes import BlockPrompt, PageChain, PrefixHasher, expand_blocks
from tests.support.reference_oracle import ReferenceOracle

pytestmark = pytest.mark.unit

BASE = 0x9E37_79B9_7F4A_7C15  # odd, large: products wrap mod 2^64
BLOCKS = (7, 3, 2**20, 0, 5)  # 5 blocks of 512; the last one partial below
LENGTH = 4 * 512 + 300


def reference(page_size: int, tokens, upto: int) -> list[int]:
    return ReferenceOracle(page_size, BASE)._page_hashes(tokens, upto).tolist()


def hashes(hasher: PrefixHasher, tokens, upto: int, chain=None) -> list[int]:
    values, n, _ = hasher.page_hashes(tokens, upto, chain)
    return values[:n].tolist()


def test_expand_blocks_is_the_mooncake_convention():
    """block(b) = [1 + 512 b, ..., 512 + 512 b], cut at the length."""
    tokens = expand_blocks((0, 3), 600)
    assert tokens[:3].tolist() == [1, 2, 3]
    assert tokens[511] == 512
    assert tokens[512:515].tolist() == [1537, 1538, 1539]
    assert len(tokens) == 600


def test_block_prompt_reads_as_the_mooncake_tokens():
    """Blocks (7, 3, 9), 1,100 tokens: token i of block b is 1 + 512 b + i. len needs no
    expansion; np.asarray, slices and scalars give those tokens; a repr holds counts only."""
    prompt = BlockPrompt((7, 3, 9), 1100)
    assert len(prompt) == 1100
    tokens = np.asarray(prompt)
    assert tokens.dtype == np.int64 and tokens.shape == (1100,)
    assert tokens[[0, 511, 512, 1023, 1024, 1099]].tolist() == [3585, 4096, 1537, 2048, 4609, 4684]
    assert prompt[515] == 1540
    assert prompt[510:514].tolist() == [4095, 4096, 1537, 1538]
    assert np.asarray(prompt, dtype=np.int32).dtype == np.int32
    assert repr(prompt) == "BlockPrompt(3 blocks, 1100 tokens)"


@pytest.mark.parametrize("length", [-1, 1025])
def test_block_prompt_refuses_a_length_its_blocks_cannot_hold(length):
    with pytest.raises(ValueError, match=f"{length} tokens do not fit 2 blocks"):
        BlockPrompt((1, 2), length)


@pytest.mark.parametrize("page_size", [1, 2, 16, 64, 512])
def test_block_hashes_equal_hashing_the_expanded_tokens(page_size):
    """Every full page of a partial last block too: floor(2348 / p) values, all equal."""
    hasher = PrefixHasher(page_size, BASE)
    want = reference(page_size, expand_blocks(BLOCKS, LENGTH), LENGTH)
    assert len(want) == LENGTH // page_size
    assert hasher.block_hashes(BLOCKS, LENGTH).tolist() == want


def test_powers_grown_by_doubling_equal_repeated_multiplication():
    """B^j for j < 5000 by doubling equals the reference's one-by-one products."""
    ref = ReferenceOracle(16, BASE)
    ref._ensure_powers(5000)
    assert PrefixHasher(16, BASE).powers(5000).tolist() == ref._powers[:5000].tolist()


def test_chain_reuses_the_prompt_and_hashes_output_tokens_past_it():
    """Prompt from block ids, then 700 output ids (a finished request's fill): the values
    equal hashing all of prompt + output; the prompt is hashed once."""
    hasher = PrefixHasher(16, BASE)
    prompt = expand_blocks(BLOCKS, LENGTH)
    chain = PageChain(prompt, BLOCKS)
    fill = np.concatenate([prompt, np.arange(2**30, 2**30 + 700)])
    assert hashes(hasher, fill, len(fill), chain) == reference(16, fill, len(fill))
    first = chain.hashes(hasher)
    assert hashes(hasher, prompt, 1000, chain) == reference(16, prompt, 1000)
    assert chain.hashes(hasher) is first  # cached, not recomputed


def test_chain_with_tokens_only_equals_the_reference():
    """No block ids (a scenario's prompt): hashed from the tokens, same values."""
    hasher = PrefixHasher(16, BASE)
    prompt = np.random.default_rng(1).integers(1, 2**31, size=1000)
    chain = PageChain(prompt)
    assert hashes(hasher, prompt, 999, chain) == reference(16, prompt, 999)


def test_page_larger_than_a_block_falls_back_to_tokens():
    """Page 1024 does not divide a 512-token block: the tokens are hashed, same values."""
    hasher = PrefixHasher(1024, BASE)
    prompt = expand_blocks(BLOCKS, LENGTH)
    chain = PageChain(prompt, BLOCKS)
    assert hashes(hasher, prompt, LENGTH, chain) == reference(1024, prompt, LENGTH)


def test_fill_that_no_longer_starts_with_the_prompt_is_hashed_from_its_tokens():
    """SGLang replaces an aborted request's origin by a stub: the cache is not trusted then."""
    hasher = PrefixHasher(16, BASE)
    prompt = expand_blocks(BLOCKS, LENGTH)
    chain = PageChain(prompt, BLOCKS)
    other = prompt.copy()
    other[100] += 1
    assert hashes(hasher, other, LENGTH, chain) == reference(16, other, LENGTH)
    assert hashes(hasher, prompt[:40], 40, chain) == reference(16, prompt, 40)

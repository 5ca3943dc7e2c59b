"""A trace line's prompt in a live server's vocabulary.

A trace carries block ids, not tokens (kvctl.replay.mooncake). The replay expands block b to
ids [1 + B b, ..., B + B b], far outside a real vocabulary; the server gets instead, per
block, B ids drawn from a generator seeded by (seed, b), in [1, vocab_size):

    hash_ids:  [ b0              | b1              | ... ]
    prompt:    [ draw(b0)[0:B]   | draw(b1)[0:B]   | ... ][:input_length]

Equal ids give equal blocks, so a prefix shared in the trace is shared on the server as in
the replay. Different ids give different blocks except by chance: two blocks whose first
page of p tokens is equal (probability (1/(vocab_size - 1))^p, 1e-43 for p = 16 and a
512-token vocabulary) would share a page the replay does not share. Id 0 is left out
(SGLang pads with it). Token ids never leave this process except in the request body.
"""

from __future__ import annotations

import numpy as np


class BlockVocabulary:
    """Maps block ids to token blocks, caching each block once drawn. Not thread-safe."""

    def __init__(self, vocab_size: int, block_tokens: int, *, seed: int = 0) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
        self.vocab_size = vocab_size
        self.block_tokens = block_tokens
        self.seed = seed
        self._blocks: dict[int, np.ndarray] = {}

    def block(self, block_id: int) -> np.ndarray:
        tokens = self._blocks.get(block_id)
        if tokens is None:
            rng = np.random.default_rng([self.seed, block_id])
            tokens = rng.integers(1, self.vocab_size, size=self.block_tokens, dtype=np.int64)
            self._blocks[block_id] = tokens
        return tokens

    def prompt(self, hash_ids, input_length: int) -> list[int]:
        """The prompt's ids, `input_length` of them (the last block cut)."""
        return self.prompt_array(hash_ids, input_length).tolist()

    def prompt_array(self, hash_ids, input_length: int) -> np.ndarray:
        """`prompt` as an int64 array (the fleet router's key, kvctl/fleet/keys.py)."""
        if not hash_ids:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([self.block(b) for b in hash_ids])[:input_length]

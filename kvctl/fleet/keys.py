"""What the router's tree sees of a trace request: its text, one character per token.

A real router in front of SGLang routes on the request text (sglang-router's cache_aware
tree is a character tree: docs/fleet-router.md). kvctl's fleet sends a prompt as text in
which token id i is the single character chr(0x4E00 + i) (kvctl/sandbox/tokenizer.py), so
the router's character tree over the text is exactly a token tree over the server's ids.
The replay therefore keys the router with the ids the server would receive for the line:
the twin's block vocabulary (kvctl/twin/prompts.py), drawn per hash block from (seed, id)
in [1, vocab_size):

    trace line:   hash_ids [b0, b1, ...], input_length n
    replica sees: [1 + 512 b0, ..., 512 + 512 b0 | 1 + 512 b1, ...][:n]   (kvctl.replay.mooncake)
    router sees:  [draw(b0)[0:512]            | draw(b1)[0:512]  ...][:n]   (this module)

Equal blocks give equal keys; different blocks differ except where two random draws share
leading ids (probability 1/(vocab_size-1) for the first id), exactly as on a real server.
Keys never leave the process.
"""

from __future__ import annotations

import numpy as np

from kvctl.twin.prompts import BlockVocabulary

DEFAULT_VOCAB = 512  # the sandbox model's vocabulary (kvctl/sandbox/files.py TINY_CONFIG)


class RouterKeys:
    """Router keys of trace records, built from cached per-block draws. Not thread-safe."""

    def __init__(self, vocab_size: int = DEFAULT_VOCAB, block_tokens: int = 512, *,
                 seed: int = 0) -> None:
        self.vocabulary = BlockVocabulary(vocab_size, block_tokens, seed=seed)

    def key(self, hash_ids, input_length: int) -> np.ndarray:
        """The int64 key of a line: its prompt's ids in the server's vocabulary, exactly
        what the twin's drive sends (BlockVocabulary.prompt)."""
        return self.vocabulary.prompt_array(hash_ids, input_length)

"""Chained, salted hashes of a prompt's fixed-size token blocks (the Mooncake trace shape).

Mooncake traces carry, per request, one hash per `block_tokens`-token block of the prompt,
each hash covering the whole prefix up to the end of its block, so two requests share a
hash id exactly when they share that prefix. The last block may be partial:

    tokens:  [ t0 .. t511 | t512 .. t1023 | ... | t(512(n-1)) .. t(L-1) ]
    hashes:  [ h0          | h1             | ... | h(n-1)                ]
    h0 = H(salt; t0..t511),  h(i) = H(salt; h(i-1) || block i)          n = ceil(L / 512)

H is keyed BLAKE2b with a per-recording random salt (16 bytes, never written anywhere), so
equal prefixes get equal ids within one recording, and an id cannot be reversed to tokens or
compared across recordings. Ids are 8-byte digests; `kvctl record` remaps them to dense
integers in first-seen order before anything is written.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

import numpy as np

from engine_adapter.base.pages import ceil_div

DEFAULT_BLOCK_TOKENS = 512  # Mooncake's block size (FAST'25 trace release)
_DIGEST_BYTES = 8


class BlockHasher:
    """Hashes prompts for one recording. Immutable after construction; thread-safe."""

    def __init__(self, *, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 salt: bytes | None = None) -> None:
        if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) \
                or block_tokens <= 0:
            raise ValueError(f"block_tokens must be a positive integer, got {block_tokens!r}")
        self.block_tokens = block_tokens
        self._salt = salt if salt is not None else secrets.token_bytes(16)
        if not 1 <= len(self._salt) <= 64:
            raise ValueError("salt must be 1 to 64 bytes (BLAKE2b key size)")

    def blocks(self, length: int) -> int:
        """How many hash ids a prompt of `length` tokens has (the last block partial)."""
        return ceil_div(length, self.block_tokens)

    def hash_prompt(self, token_ids: Sequence[int] | np.ndarray, *,
                    namespace: bytes = b"") -> list[bytes]:
        """The chained digest of every block of `token_ids` (one per block, in order).

        `namespace` seeds the chain (SGLang keys its radix tree by `extra_key` and
        `cache_salt` too, and seeds its own block hashes with the salt), so requests that
        SGLang would never share a prefix between never share an id either. Empty: no seed.
        """
        tokens = np.ascontiguousarray(np.asarray(token_ids, dtype=np.int64))
        raw = tokens.astype("<i8", copy=False).tobytes()
        step = self.block_tokens * 8
        digests: list[bytes] = []
        previous = b""
        if namespace:
            seed = hashlib.blake2b(b"namespace\0", key=self._salt, digest_size=_DIGEST_BYTES)
            seed.update(namespace)
            previous = seed.digest()
        for start in range(0, len(raw), step):
            h = hashlib.blake2b(previous, key=self._salt, digest_size=_DIGEST_BYTES)
            h.update(raw[start:start + step])
            previous = h.digest()
            digests.append(previous)
        return digests

"""Page-boundary prefix hashes for the content oracle, computed once per request.

The hash (seed 000 0x07A: the oracle's page-granular prefix identity) is polynomial:

    h(prefix of n tokens) = sum_{j<n} t_j * B^j  mod 2^64      (numpy uint64 wrap-around)

B is a random odd 64-bit multiplier fixed per engine. It is a chain over pages:

    H_m = H_{m-1} + B^{m p} * sum_{i<p} t_{m p + i} B^i        (page m, page size p)

so a page's term needs only its own tokens and its index. A page of consecutive ids
f, f+1, ..., f+p-1 (every page of a Mooncake block, when p divides 512) has the closed form

    sum_{i<p} (f + i) B^i = f * S + T,   S = sum_{i<p} B^i,   T = sum_{i<p} i B^i

so its term comes from (block id, page index in block) without materializing a token:

    hash_ids:  [ b0                  | b1                  | ...
    pages:     [ f=1+512 b0 | +p | ..| f=1+512 b1 | +p | ..| ...     (q = 512 / p per block)
    H:           H_0   H_1  ...        H_q  ...                      (full pages only)

The block size is 512 for Mooncake's traces; a recording's sidecar may give another (any
multiple of the page size, kvctl.replay.trace_blocks): read 512 above as `block_tokens`.

Either way the values are bit-identical to hashing the tokens, so pages from a trace's
block ids, from a scenario's tokens and from decode output (synthetic ids) share one set.

`PageChain` caches one request's prompt hashes (built on first use, dropped with the
request); `PrefixHasher.page_hashes` answers any (tokens, upto) from it, hashing only the
tokens past the prompt's last full page (decode output, a retracted request's refill).
Never exported: hashes stay in process memory.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

BLOCK_TOKENS = 512  # tokens per Mooncake hash block (a recording's sidecar may say other)
_U64 = np.uint64
_EMPTY = np.empty(0, dtype=_U64)


def expand_blocks(block_ids: Sequence[int], length: int,
                  block_tokens: int = BLOCK_TOKENS) -> np.ndarray:
    """The synthetic prompt of a block-id sequence, cut at `length` (kvctl.replay.mooncake):
    block(b) = [1 + B b, 2 + B b, ..., B + B b] with B = block_tokens. `PageChain` hashes
    block ids as if they were expanded this way."""
    ids = np.asarray(block_ids, dtype=np.int64)
    offsets = np.arange(1, block_tokens + 1, dtype=np.int64)
    return (ids[:, None] * block_tokens + offsets[None, :]).reshape(-1)[:length]


class BlockPrompt:
    """A Mooncake prompt kept as its block ids: `expand_blocks(block_ids, length)`, built
    each time it is read (`np.asarray`, indexing), never stored.

    A `RequestSpec.tokens` of this type costs 8 B per 512-token block instead of 8 B per
    token. On the full shipped trace at the default pool, up to 6,700 requests wait at once;
    their expanded prompts held about 650 MB of the replay's 2.6 GB peak RSS. The engine
    expands a prompt when the request is first examined for admission (its `Req`)."""

    __slots__ = ("block_ids", "length", "block_tokens")

    def __init__(self, block_ids: Sequence[int], length: int,
                 block_tokens: int = BLOCK_TOKENS) -> None:
        if not 0 <= length <= block_tokens * len(block_ids):
            raise ValueError(f"{length} tokens do not fit {len(block_ids)} blocks")
        self.block_ids = block_ids
        self.length = length
        self.block_tokens = block_tokens

    def __len__(self) -> int:
        return self.length

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        tokens = expand_blocks(self.block_ids, self.length, self.block_tokens)
        return tokens if dtype is None else tokens.astype(dtype, copy=False)

    def __getitem__(self, index):
        return np.asarray(self)[index]

    def __repr__(self) -> str:  # no token ids (and the ids only by count)
        return f"BlockPrompt({len(self.block_ids)} blocks, {self.length} tokens)"


class PrefixHasher:
    """The hash function of one oracle: a base B and the powers B^j, grown on demand."""

    def __init__(self, page_size: int, base: int) -> None:
        self.page_size = page_size
        self.base = _U64(base)
        self._powers = np.ones(1, dtype=_U64)
        self._in_block: dict[int, np.ndarray] = {}  # per block size: (1 + k p) S + T
        powers = self.powers(page_size)
        with np.errstate(over="ignore"):
            self._page_base = powers[-1] * self.base  # B^p
        self._page_powers = np.ones(1, dtype=_U64)  # B^(k p), grown by page_powers
        with np.errstate(over="ignore"):
            self._sum = powers.sum(dtype=_U64)  # S
            self._ramp = (np.arange(page_size, dtype=_U64) * powers).sum(dtype=_U64)  # T

    def powers(self, n: int) -> np.ndarray:
        """B^0 .. B^(n-1). Grown by doubling: powers[h:2h] = powers[:h] * B^h."""
        have = len(self._powers)
        while have < n:
            with np.errstate(over="ignore"):
                step = self._powers[-1] * self.base  # B^have
                self._powers = np.concatenate([self._powers, self._powers * step])
            have = len(self._powers)
        return self._powers[:n]

    def page_powers(self, first: int, n: int) -> np.ndarray:
        """B^(k p) for pages k = first .. first+n-1 (contiguous: one 8 B read a page, not a
        strided read of the token powers). Grown by doubling, as `powers`."""
        have = len(self._page_powers)
        while have < first + n:
            with np.errstate(over="ignore"):
                step = self._page_powers[-1] * self._page_base  # B^(have p)
                self._page_powers = np.concatenate([self._page_powers,
                                                    self._page_powers * step])
            have = len(self._page_powers)
        return self._page_powers[first : first + n]

    def token_hashes(self, tokens: np.ndarray, start_page: int = 0, carry: int = 0) -> np.ndarray:
        """H at each full page boundary of `tokens`, which begin at page `start_page` of
        their sequence whose hash so far is `carry` (H_{start_page - 1}, or 0).

        Page by page (the chain in the module docstring): each page's term is its tokens
        times B^0 .. B^(p-1) (one matrix-vector product over the (pages, p) view, no
        per-token temporary), times B^(m p), then a running sum over pages (uint64 arithmetic
        wraps mod 2^64 as the per-token form does: the same values)."""
        p = self.page_size
        pages = len(tokens) // p
        if pages == 0:
            return _EMPTY
        ids = tokens[: pages * p]
        ids = ids.view(_U64) if ids.dtype == np.int64 else ids.astype(_U64)
        with np.errstate(over="ignore"):
            terms = ids.reshape(pages, p) @ self.powers(p)
            terms *= self.page_powers(start_page, pages)
            terms[0] += _U64(carry)
            return np.cumsum(terms, dtype=_U64, out=terms)

    def block_hashes(self, block_ids: Sequence[int], length: int,
                     block_tokens: int = BLOCK_TOKENS) -> np.ndarray:
        """H at each full page boundary of the first `length` tokens of the expansion of
        `block_ids` (expand_blocks); needs page_size | block_tokens. Page k of block b has
        f = 1 + 512 b + k p, so its term is B^{m p} (512 S b + (1 + k p) S + T) (512 being
        `block_tokens`)."""
        p = self.page_size
        per_block = block_tokens // p
        pages = min(length // p, len(block_ids) * per_block)
        if pages == 0:
            return _EMPTY
        in_block = self._in_block.get(block_tokens)
        if in_block is None:
            with np.errstate(over="ignore"):
                ks = np.arange(per_block, dtype=_U64) * _U64(p) + _U64(1)
                in_block = self._in_block[block_tokens] = ks * self._sum + self._ramp
        blocks = np.asarray(block_ids, dtype=_U64)
        with np.errstate(over="ignore"):
            scaled = blocks * (_U64(block_tokens) * self._sum)
            terms = (scaled[:, None] + in_block[None, :]).reshape(-1)[:pages]
            terms *= self.powers(pages * p)[::p]
            return np.cumsum(terms, dtype=_U64)

    def page_hashes(self, tokens: Sequence[int] | np.ndarray, upto: int,
                    chain: PageChain | None = None) -> tuple[np.ndarray, int, int]:
        """(values, n, trusted): values[:n] are H at each full page boundary of
        tokens[:upto] (values may run longer: read-only, not copied), and values[:trusted]
        are `chain`'s cached prompt hashes. With `chain` (the request whose tokens these
        are), those are reused wherever `tokens` still starts with its prompt (one vectorized
        compare per fill object; SGLang grows a fill in place or replaces it, never rewrites
        its prefix); otherwise every token is hashed (the same values)."""
        seq = _as_int64(tokens)
        pages = min(upto, len(seq)) // self.page_size
        if chain is None:
            values = self.token_hashes(seq[: pages * self.page_size])
            return values, len(values), 0
        cached = chain.hashes(self)
        known = min(pages, len(cached))
        if not chain.starts(tokens, seq, known * self.page_size):
            values = self.token_hashes(seq[: pages * self.page_size])
            return values, len(values), 0
        if pages <= len(cached):
            return cached, pages, known
        tail = seq[known * self.page_size : pages * self.page_size]
        carry = int(cached[known - 1]) if known else 0
        values = np.concatenate([cached, self.token_hashes(tail, known, carry)])
        return values, len(values), known


class PageChain:
    """One request's prompt page hashes, computed at most once (on the oracle's first
    question about it) and dropped with the request. From `block_ids` when the prompt is
    their expansion (blocks of `block_tokens`) and the page size divides a block; else from
    the prompt's tokens.

    recorded: per oracle key, the range of prompt pages [lo, hi) the oracle already added
    to that key's set from this chain (a later record of the same request skips them).
    """

    __slots__ = ("prompt", "block_ids", "block_tokens", "recorded", "_hashes", "_hasher",
                 "_fill", "_checked")

    def __init__(self, prompt: np.ndarray, block_ids: Sequence[int] | None = None,
                 block_tokens: int = BLOCK_TOKENS) -> None:
        self.prompt = _as_int64(prompt)
        self.block_ids = block_ids
        self.block_tokens = block_tokens
        self.recorded: dict[tuple[str, int], tuple[int, int]] = {}
        self._hashes: np.ndarray | None = None
        self._hasher: PrefixHasher | None = None
        self._fill: weakref.ref | None = None  # the last fill found to start with the prompt
        self._checked = 0  # ... over this many tokens

    def starts(self, fill: object, seq: np.ndarray, n: int) -> bool:
        """Whether seq[:n] == prompt[:n]; compared once per fill object and length (a weak
        reference: a fill SGLang replaced is not kept alive)."""
        if self._fill is not None and self._fill() is fill and n <= self._checked:
            return True
        if not np.array_equal(seq[:n], self.prompt[:n]):
            return False
        try:
            self._fill, self._checked = weakref.ref(fill), n
        except TypeError:  # a list: compared every time
            self._fill = None
        return True

    def hashes(self, hasher: PrefixHasher) -> np.ndarray:
        """H at each full page boundary of the prompt (computed once per hasher)."""
        if self._hashes is None or self._hasher is not hasher:
            if self.block_ids is not None and self.block_tokens % hasher.page_size == 0:
                self._hashes = hasher.block_hashes(self.block_ids, len(self.prompt),
                                                   self.block_tokens)
            else:
                self._hashes = hasher.token_hashes(self.prompt)
            self._hasher = hasher
            self.recorded = {}
        return self._hashes


def _as_int64(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """A zero-copy int64 view where the input allows (numpy, SGLang's array('q'))."""
    return np.asarray(tokens, dtype=np.int64)

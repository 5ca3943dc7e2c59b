"""Content oracle: the prefix lengths SGLang's tree cannot tell us (seed 000 0x07A).

SGLang's match returns S_indexed: what is resident *now* in the request's own namespace.
The funnel also needs counterfactuals that no lookup in a namespaced tree can answer
without mutating it (a match touches LRU state and may split nodes, seed 000 0x08B):

    S_any  longest prefix any namespace or model generation ever computed
    S_ns   longest prefix the request's own namespace computed, any generation
    S_sem  longest prefix its namespace computed under the current generation

The oracle records, per (namespace, generation), a hash of every page-aligned prefix that
was ever prefilled or decoded, and answers those three lengths at page granularity. It
never decides a hit; it only explains one. Invariant checked by the engine and the tests:
S_runtime <= S_sem (no cross-namespace hit, no stale-generation hit).

Hashing: h(prefix of n tokens) = sum_{j<n} t_j * B^j mod 2^64 (numpy uint64 wrap-around),
computed for all page boundaries of a sequence in one cumsum; B is a random odd 64-bit
multiplier fixed per engine. This is an in-memory statistic, never exported (no keys or
ids leave the process).

    tokens:  | page 0 | page 1 | page 2 |tail|
    hashes:          h0       h1       h2        (tail pages are not reusable: not hashed)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NamespaceKey = tuple[str, int]  # (namespace label, model generation)


class ContentOracle:
    """Remembers which page-aligned prefixes were computed under which namespace key."""

    def __init__(self, page_size: int, seed: int = 0) -> None:
        self.page_size = page_size
        rng = np.random.default_rng(seed ^ 0x5EED_CAFE)
        self._base = np.uint64(int(rng.integers(1, 2**62)) * 2 + 1)
        self._powers = np.ones(1, dtype=np.uint64)
        self._seen: dict[NamespaceKey, set[int]] = {}

    def _page_hashes(self, tokens: Sequence[int] | np.ndarray, upto: int | None = None) -> np.ndarray:
        """Prefix hashes at each full page boundary of tokens[:upto]."""
        n = len(tokens) if upto is None else min(upto, len(tokens))
        n_full = (n // self.page_size) * self.page_size
        if n_full == 0:
            return np.empty(0, dtype=np.uint64)
        self._ensure_powers(n_full)
        arr = np.asarray(tokens[:n_full], dtype=np.int64).astype(np.uint64)
        with np.errstate(over="ignore"):
            prefix = np.cumsum(arr * self._powers[:n_full], dtype=np.uint64)
        return prefix[self.page_size - 1 :: self.page_size]

    def _ensure_powers(self, n: int) -> None:
        have = len(self._powers)
        if have >= n:
            return
        size = max(n, 2 * have)
        powers = np.empty(size, dtype=np.uint64)
        powers[:have] = self._powers
        with np.errstate(over="ignore"):
            for index in range(have, size):
                powers[index] = powers[index - 1] * self._base
        self._powers = powers

    def record(self, key: NamespaceKey, tokens: Sequence[int] | np.ndarray, upto: int,
               known: int = 0) -> None:
        """Remember that tokens[:upto] (page-floored) now exist as computed K/V under `key`.
        known: a prefix length already recorded under `key` (its pages are skipped)."""
        hashes = self._page_hashes(tokens, upto)
        skip = known // self.page_size
        if len(hashes) > skip:
            self._seen.setdefault(key, set()).update(hashes[skip:].tolist())

    def lengths(self, key: NamespaceKey, tokens: Sequence[int] | np.ndarray, cap: int) -> tuple[int, int, int]:
        """(S_any, S_ns, S_sem) in tokens for tokens[:cap], page aligned."""
        hashes = self._page_hashes(tokens, cap)
        if not len(hashes) or not self._seen:
            return 0, 0, 0
        values = hashes.tolist()
        s_sem = self._longest(self._seen.get(key), values)
        s_ns = s_sem
        s_any = s_sem
        for other, seen in self._seen.items():
            if other == key:
                continue
            length = self._longest(seen, values)
            s_any = max(s_any, length)
            if other[0] == key[0]:
                s_ns = max(s_ns, length)
        return s_any * self.page_size, s_ns * self.page_size, s_sem * self.page_size

    @staticmethod
    def _longest(seen: set[int] | None, values: list[int]) -> int:
        """Number of leading page hashes present. Prefix-closed, so binary search works."""
        if not seen:
            return 0
        low, high = 0, len(values)
        while low < high:
            mid = (low + high + 1) // 2
            if values[mid - 1] in seen:
                low = mid
            else:
                high = mid - 1
        return low

    @property
    def remembered_pages(self) -> int:
        return sum(len(s) for s in self._seen.values())


class NullOracle:
    """Instrumentation off (benchmarks of its overhead): remembers nothing, explains nothing.
    The funnel then stops at `candidates` for every request; integrity checks do not apply."""

    page_size = 0
    remembered_pages = 0

    def record(self, key, tokens, upto, known: int = 0) -> None:
        return None

    def lengths(self, key, tokens, cap) -> tuple[int, int, int]:
        return 0, 0, 0

"""The content oracle as it was before `HashSet` (kvctl main at d3cb734), kept verbatim as
the baseline benchmarks/bench_oracle.py times the current one against: one Python set of
page hashes per key, `set.update(values.tolist())` to record, a binary search of
`values.item(mid) in seen` for lengths (it assumes each key's set is prefix-closed, which
the engine's `known` guarantees). Only the class name differs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine_adapter.embedded.page_hashes import PageChain, PrefixHasher

NamespaceKey = tuple[str, int]  # (namespace label, model generation)


class SetOracle:
    """Remembers which page-aligned prefixes were computed under which namespace key."""

    def __init__(self, page_size: int, seed: int = 0) -> None:
        self.page_size = page_size
        rng = np.random.default_rng(seed ^ 0x5EED_CAFE)
        self._hasher = PrefixHasher(page_size, int(rng.integers(1, 2**62)) * 2 + 1)
        self._seen: dict[NamespaceKey, set[int]] = {}

    def record(self, key: NamespaceKey, tokens: Sequence[int] | np.ndarray, upto: int,
               known: int = 0, chain: PageChain | None = None) -> None:
        """Remember that tokens[:upto] (page-floored) now exist as computed K/V under `key`.
        known: a prefix length already recorded under `key` (its pages are skipped).
        chain: the page hashes of the request whose tokens these are (reused, not redone)."""
        values, n, trusted = self._hasher.page_hashes(tokens, upto, chain)
        skip = start = known // self.page_size
        if chain is not None:
            start = self._unrecorded(chain, key, skip, min(trusted, n))
        if n > start:
            self._seen.setdefault(key, set()).update(values[start:n].tolist())

    @staticmethod
    def _unrecorded(chain: PageChain, key: NamespaceKey, skip: int, trusted: int) -> int:
        """First page of [skip, ...) not already in `key`'s set from this chain's own
        earlier records. chain.recorded[key] = (lo, hi): prompt pages [lo, hi) were added
        (a set only grows); the first `trusted` hashes of this call are those prompt pages.

            pages:   0 ... lo ...... skip ...... hi ........ trusted ..... len
            added:         [==== earlier =========)
            now:                       (skip)    [=== start: added now ===========)
        """
        lo, hi = chain.recorded.get(key, (0, 0))
        if lo <= skip <= hi:
            chain.recorded[key] = (lo, max(hi, trusted))
            return max(skip, min(hi, trusted))
        if trusted > skip:
            chain.recorded[key] = (skip, trusted)
        return skip

    def lengths(self, key: NamespaceKey, tokens: Sequence[int] | np.ndarray, cap: int,
                chain: PageChain | None = None) -> tuple[int, int, int]:
        """(S_any, S_ns, S_sem) in tokens for tokens[:cap], page aligned."""
        if not self._seen:
            return 0, 0, 0
        values, n, _ = self._hasher.page_hashes(tokens, cap, chain)
        if not n:
            return 0, 0, 0
        s_sem = self._longest(self._seen.get(key), values, n)
        s_ns = s_sem
        s_any = s_sem
        for other, seen in self._seen.items():
            if other == key:
                continue
            length = self._longest(seen, values, n)
            s_any = max(s_any, length)
            if other[0] == key[0]:
                s_ns = max(s_ns, length)
        return s_any * self.page_size, s_ns * self.page_size, s_sem * self.page_size

    @staticmethod
    def _longest(seen: set[int] | None, values: np.ndarray, n: int) -> int:
        """Number of leading page hashes of values[:n] present. Prefix-closed, so binary
        search works."""
        if not seen:
            return 0
        low, high = 0, n
        while low < high:
            mid = (low + high + 1) // 2
            if values.item(mid - 1) in seen:
                low = mid
            else:
                high = mid - 1
        return low

    @property
    def remembered_pages(self) -> int:
        return sum(len(s) for s in self._seen.values())


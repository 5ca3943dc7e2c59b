"""The content oracle as it was before page chains (kvctl main at d3d5d56), kept verbatim as
the reference the tests compare `ContentOracle` against: every call hashes every token of
`tokens[:upto]` (one cumsum) and looks the page-boundary values up.

`base` is the engine oracle's multiplier, so the two remember bit-identical hash sets."""

from __future__ import annotations

import numpy as np


class ReferenceOracle:
    def __init__(self, page_size: int, base: int) -> None:
        self.page_size = page_size
        self._base = np.uint64(base)
        self._powers = np.ones(1, dtype=np.uint64)
        self._seen: dict[tuple[str, int], set[int]] = {}

    def _page_hashes(self, tokens, upto=None) -> np.ndarray:
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

    def record(self, key, tokens, upto: int, known: int = 0) -> None:
        hashes = self._page_hashes(tokens, upto)
        skip = known // self.page_size
        if len(hashes) > skip:
            self._seen.setdefault(key, set()).update(hashes[skip:].tolist())

    def lengths(self, key, tokens, cap: int) -> tuple[int, int, int]:
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
    def _longest(seen, values) -> int:
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

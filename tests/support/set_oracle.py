"""The content oracle's storage as it was before `HashSet` (kvctl main at d3cb734), the
baseline benchmarks/bench_oracle.py times the current one against: one Python set of page
hashes per key, `set.update(values.tolist())` at every record. Everything else (which pages
a record adds, the binary search of `lengths`) is `ContentOracle`'s own, shared."""

from __future__ import annotations

import numpy as np

from engine_adapter.embedded.oracle import ContentOracle, NamespaceKey


class SetOracle(ContentOracle):
    """`ContentOracle` with Python sets, updated at every record (nothing pending)."""

    def __init__(self, page_size: int, seed: int = 0) -> None:
        super().__init__(page_size, seed)
        self._seen: dict[NamespaceKey, set[int]] = {}

    def _store(self, key: NamespaceKey, pages: np.ndarray) -> None:
        self._seen.setdefault(key, set()).update(pages.tolist())

    def _flush(self) -> None:
        pass  # every record is already in its set

    def remembered(self) -> dict[NamespaceKey, set[int]]:
        return {key: set(seen) for key, seen in self._seen.items()}

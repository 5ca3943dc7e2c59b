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

Hashing (page_hashes.py): a polynomial prefix hash mod 2^64 with a random odd base fixed
per engine, at every full page boundary. Given a request's `PageChain` (Tracked.chain), a
request's prompt is hashed once, from its Mooncake block ids where it has them, and only
tokens past the prompt's last full page are hashed per call; without one, the tokens are.
Both give the same values. An in-memory statistic, never exported (no keys or ids leave the
process).

    tokens:  | page 0 | page 1 | page 2 |tail|
    hashes:          h0       h1       h2        (tail pages are not reusable: not hashed)

Memory: one uint64 slot per remembered page per key in `_seen` (`remembered_pages`), a
`HashSet` (hash_set.py) kept at most half full: 16 to 24 B per page (`nbytes`); sized
once from `expected_pages` when the workload gives a bound (a Mooncake trace: 6.1M pages,
98 MB on the shipped hour, where growing by rehashes took 0.5 s of the replay), plus a live
request's prompt page hashes (`PageChain`: 8 B per page, dropped with the request). A record
only queues its pages (views of hash arrays, at most PENDING_PAGES); the next question (or
PENDING_PAGES) adds them, one vectorized `add` per key for all the records in between.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine_adapter.embedded.hash_set import HashSet
from engine_adapter.embedded.page_hashes import PageChain, PrefixHasher

NamespaceKey = tuple[str, int]  # (namespace label, model generation)
PENDING_PAGES = 1 << 16  # recorded pages queued (views; their arrays live until the add)


class ContentOracle:
    """Remembers which page-aligned prefixes were computed under which namespace key."""

    def __init__(self, page_size: int, seed: int = 0, expected_pages: int = 0) -> None:
        """expected_pages: the first key's set is sized for that many pages (no rehash
        while the estimate holds); later keys' sets grow from empty."""
        self.page_size = page_size
        self._first_capacity = max(int(expected_pages), 0)
        rng = np.random.default_rng(seed ^ 0x5EED_CAFE)
        self._hasher = PrefixHasher(page_size, int(rng.integers(1, 2**62)) * 2 + 1)
        self._seen: dict[NamespaceKey, HashSet] = {}
        # Recorded pages not yet in their set: one `add` per key at the next question
        # amortizes its fixed cost (~20 numpy calls) over the records in between.
        self._pending: dict[NamespaceKey, list[np.ndarray]] = {}
        self._pending_pages = 0

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
            self._store(key, values[start:n])

    def _store(self, key: NamespaceKey, pages: np.ndarray) -> None:
        """Queue new page hashes of `key` (read-only arrays) for its set."""
        self._pending.setdefault(key, []).append(pages)
        self._pending_pages += len(pages)
        if self._pending_pages > PENDING_PAGES:
            self._flush()

    def _flush(self) -> None:
        """Adds the pending pages to their keys' sets."""
        for key, parts in self._pending.items():
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = HashSet(self._first_capacity)
                self._first_capacity = 0
            seen.add(parts[0] if len(parts) == 1 else np.concatenate(parts))
        self._pending.clear()
        self._pending_pages = 0

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
        if self._pending:
            self._flush()
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
    def _longest(seen: HashSet | None, values: np.ndarray, n: int) -> int:
        """Number of leading page hashes of values[:n] present. Prefix-closed (a record's
        `known` is a prefix its key already holds), so binary search works: about log2(n)
        scalar probes of ~1 us (12 us a call on the shipped trace, where one vectorized
        lookup of all n pages costs ~80 us)."""
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
        self._flush()
        return sum(len(s) for s in self._seen.values())

    @property
    def nbytes(self) -> int:
        """Bytes the remembered pages' sets hold (chains aside: they belong to requests)."""
        self._flush()
        return sum(s.nbytes for s in self._seen.values())

    def remembered(self) -> dict[NamespaceKey, set[int]]:
        """The remembered page hashes per key, as Python sets (tests, benchmarks: a copy
        of about 60 B per page)."""
        self._flush()
        return {key: set(s.to_array().tolist()) for key, s in self._seen.items()}


class NullOracle:
    """Instrumentation off (benchmarks of its overhead): remembers nothing, explains nothing.
    The funnel then stops at `candidates` for every request; integrity checks do not apply."""

    page_size = 0
    remembered_pages = 0
    nbytes = 0

    def record(self, key, tokens, upto, known: int = 0, chain=None) -> None:
        return None

    def lengths(self, key, tokens, cap, chain=None) -> tuple[int, int, int]:
        return 0, 0, 0

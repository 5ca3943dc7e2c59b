"""The what-if shadow's compiled mini-caches (engine_adapter/instrument/whatif_lru.py) against
a plain OrderedDict LRU touched one key at a time: same content, recency order, weight and
capped flag after every touch, on random streams that collide in the hash table, evict by
weight and hit the key bound."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from engine_adapter.instrument.whatif_lru import MiniCaches

pytestmark = pytest.mark.unit


class ReferenceLru:
    """The semantics MiniCaches must keep, written the obvious way."""

    def __init__(self, capacity: float, max_keys: int) -> None:
        self.capacity, self.max_keys = capacity, max_keys
        self.entries: OrderedDict[int, float] = OrderedDict()
        self.held, self.capped = 0.0, False

    def touch(self, keys, weights) -> None:
        for key, weight in zip(keys, weights):
            if key in self.entries:
                self.entries.move_to_end(key)
                continue
            self.entries[key] = weight
            self.held += weight
            while self.held > self.capacity or len(self.entries) > self.max_keys:
                if len(self.entries) > self.max_keys:
                    self.capped = True
                self.held -= self.entries.popitem(last=False)[1]


def recency(caches: MiniCaches, c: int) -> list[int]:
    """Scale c's keys, least recent first (walking the recency list)."""
    out, slot = [], int(caches.head[c])
    while slot != -1:
        out.append(int(caches.keys[c, slot]))
        slot = int(caches.newer[c, slot])
    return out


def test_minicaches_match_an_ordereddict_lru_on_random_streams():
    """3,000 touches of 1 to 40 keys drawn from 300 (so keys repeat, move and come back after
    eviction), weights 1 or 100, three capacities and a 64-key bound (the table has 256
    cells: probe runs collide and deletions shift them): after every touch each scale has the
    reference's keys in the reference's order, its weight and its capped flag, and the hit
    runs agree."""
    rng = np.random.default_rng(28)
    capacities, max_keys = [50.0, 400.0, 5000.0], 64
    caches = MiniCaches(capacities, max_keys)
    refs = [ReferenceLru(c, max_keys) for c in capacities]
    universe = rng.integers(0, 2**63, size=300, dtype=np.uint64)
    weight_of = {int(k): (100.0 if i % 7 == 0 else 1.0) for i, k in enumerate(universe)}
    for _ in range(3000):
        order = rng.choice(universe, size=int(rng.integers(1, 41)), replace=False)
        weights = np.array([weight_of[int(k)] for k in order])
        runs = caches.hit_runs(order).tolist()
        expected_run = 0
        for c, ref in enumerate(refs):
            while expected_run < len(order) and int(order[expected_run]) in ref.entries:
                expected_run += 1
            assert runs[c] == expected_run
        caches.touch(order, weights)
        for c, ref in enumerate(refs):
            ref.touch([int(k) for k in order], weights.tolist())
            assert recency(caches, c) == list(ref.entries)
            assert caches.held[c] == ref.held
            assert int(caches.count[c]) == len(ref.entries)
            assert bool(caches.capped[c]) == ref.capped
    assert [bool(x) for x in caches.capped] == [False, True, True]

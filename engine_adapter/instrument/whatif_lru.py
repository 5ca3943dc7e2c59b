"""The what-if shadow's mini-caches (instrument/whatif.py) as compiled LRUs: one weighted LRU
per pool scale over sampled page keys, in flat numpy arrays walked by numba kernels.

Same semantics as an OrderedDict per scale touched one key at a time (the pure-Python form
this replaced, 1.6 to 1.9x slower per request on Mooncake prompts): a cached key moves to the most recent end; a new
key is appended with its weight, then least recent keys are evicted while the weight exceeds
the capacity or the count exceeds the key bound (the bound flags the scale `capped`). The
weights are added and subtracted in the same order, so the float sums match bit for bit.

Layout per scale c (K = key bound + 1 slots, the +1 for the moment after an insert):

    keys[c, s], weights[c, s]      slot s's page key and weight
    newer[c, s], older[c, s]       the recency list (slot ids; -1 ends it); head[c] is the
                                   least recent slot, tail[c] the most recent
    table[c, i]                    open addressing, linear probing: slot id or -1; deletion
                                   shifts the run back (no tombstones), load <= 1/2
    free[c, :n_free[c]]            unused slots (a stack)

    locks[c, s]                    pins on slot s (a running request's path, whatif_events.py);
                                   a pinned slot is off the recency list, never evicted

Memory: (8 + 8 + 4 + 4 + 4 + 4) B a slot and 2 B a table cell (4 B above 32,766 keys; at least 2
cells a key, a power of two), allocated once: 1.1 MiB a scale at the default bound of 32,766
keys (instrument/whatif.py), 6.75 MiB for six. Slots are reused from a stack, so the live
ones stay dense at the low ids; the table is the part read at random (128 KiB a scale).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = -1


@njit(cache=True, nogil=True)
def _cell(key, mask):
    """A key's home cell (Fibonacci hashing of the already salted key)."""
    return np.int64(((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & np.uint64(mask))


@njit(cache=True, nogil=True)
def _find(table, keys, c, key, mask):
    """(cell, slot) of `key` in scale c, slot -1 when absent (cell: where it would go)."""
    i = _cell(key, mask)
    while True:
        s = table[c, i]
        if s == _EMPTY or keys[c, s] == key:
            return i, s
        i = (i + 1) & mask


@njit(cache=True, nogil=True)
def _unlink(newer, older, head, tail, c, s):
    o, n = older[c, s], newer[c, s]
    if o == _EMPTY:
        head[c] = n
    else:
        newer[c, o] = n
    if n == _EMPTY:
        tail[c] = o
    else:
        older[c, n] = o


@njit(cache=True, nogil=True)
def _append(newer, older, head, tail, c, s):
    t = tail[c]
    older[c, s] = t
    newer[c, s] = _EMPTY
    if t == _EMPTY:
        head[c] = s
    else:
        newer[c, t] = s
    tail[c] = s


@njit(cache=True, nogil=True)
def _delete_cell(table, keys, c, i, mask):
    """Empty cell i and shift the probe run after it back (linear probing deletion)."""
    j = i
    while True:
        table[c, i] = _EMPTY
        while True:
            j = (j + 1) & mask
            s = table[c, j]
            if s == _EMPTY:
                return
            home = _cell(keys[c, s], mask)
            # keep s at j when its home lies cyclically in (i, j]
            if (i <= j and i < home <= j) or (i > j and (home > i or home <= j)):
                continue
            table[c, i] = s
            i = j
            break


@njit(cache=True, nogil=True)
def _match(table, keys, c, mask, sampled, start):
    """How many of sampled[start:] lead in scale c (cached, in order): the hit run."""
    run = start
    while run < len(sampled):
        if _find(table, keys, c, sampled[run], mask)[1] == _EMPTY:
            break
        run += 1
    return run


@njit(cache=True, nogil=True)
def _evict(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
           capped, capacity, max_keys, mask, c):
    """Evict scale c's least recent unpinned keys while its weight exceeds the capacity or
    its count the key bound (pinned keys are off the recency list: never evicted)."""
    while (held[c] > capacity[c] or count[c] > max_keys) and head[c] != _EMPTY:
        if count[c] > max_keys:
            capped[c] = True
        gone = head[c]
        _unlink(newer, older, head, tail, c, gone)
        _delete_cell(table, keys, c, _find(table, keys, c, keys[c, gone], mask)[0], mask)
        held[c] -= weights[c, gone]
        count[c] -= 1
        free[c, n_free[c]] = gone
        n_free[c] += 1


@njit(cache=True, nogil=True)
def _new_slot(table, keys, weights, free, n_free, held, count, capped, c, i, key, weight):
    """Put `key` in a free slot of scale c at table cell i; -1 (and capped) when every
    slot is taken (all pinned: nothing could be evicted)."""
    if n_free[c] == 0:
        capped[c] = True
        return _EMPTY
    n_free[c] -= 1
    s = free[c, n_free[c]]
    keys[c, s] = key
    weights[c, s] = weight
    table[c, i] = s
    count[c] += 1
    held[c] += weight
    return s


@njit(cache=True, nogil=True)
def _touch(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
           capped, capacity, max_keys, mask, c, order, order_weights, locks):
    """Touch `order` (oldest first) in scale c, evicting least recent keys as needed. A
    pinned key (locks > 0) stays pinned: off the recency list until its last unpin."""
    for k in range(len(order)):
        key = order[k]
        i, s = _find(table, keys, c, key, mask)
        if s != _EMPTY:
            if locks[c, s] == 0:
                _unlink(newer, older, head, tail, c, s)
                _append(newer, older, head, tail, c, s)
            continue
        s = _new_slot(table, keys, weights, free, n_free, held, count, capped, c, i, key,
                      order_weights[k])
        if s == _EMPTY:
            continue
        _append(newer, older, head, tail, c, s)
        _evict(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
               capped, capacity, max_keys, mask, c)


@njit(cache=True, nogil=True)
def _pin(table, keys, weights, newer, older, head, tail, free, n_free, held, count, capped,
         mask, c, order, order_weights, locks):
    """Pin `order` in scale c (a running request's lock on its path, SGLang's inc_lock_ref):
    a new key enters pinned, a cached unpinned one leaves the recency list; every key's
    lock count goes up by one. Nothing is evicted here (the caller evicts to fit)."""
    for k in range(len(order)):
        i, s = _find(table, keys, c, order[k], mask)
        if s == _EMPTY:
            s = _new_slot(table, keys, weights, free, n_free, held, count, capped, c, i,
                          order[k], order_weights[k])
            if s == _EMPTY:
                continue
        elif locks[c, s] == 0:
            _unlink(newer, older, head, tail, c, s)
        locks[c, s] += 1


@njit(cache=True, nogil=True)
def _unpin(table, keys, newer, older, head, tail, mask, c, order, locks):
    """Drop one lock of each of `order` (oldest first) in scale c; a key left with none
    joins the recency list at the recent end (SGLang's insert at a request's finish
    stamps its whole path). Keys not cached (never pinned, or dropped at the bound) are
    skipped."""
    for k in range(len(order)):
        s = _find(table, keys, c, order[k], mask)[1]
        if s == _EMPTY or locks[c, s] == 0:
            continue
        locks[c, s] -= 1
        if locks[c, s] == 0:
            _append(newer, older, head, tail, c, s)


@njit(cache=True, nogil=True)
def _match_all(table, keys, mask, sampled, runs):
    """runs[c]: the hit run of every scale; the scales nest, so each starts where the
    smaller one's ended."""
    run = 0
    for c in range(len(runs)):
        run = _match(table, keys, c, mask, sampled, run)
        runs[c] = run


@njit(cache=True, nogil=True)
def _touch_all(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
               capped, capacity, max_keys, mask, order, order_weights, locks):
    for c in range(len(held)):
        _touch(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
               capped, capacity, max_keys, mask, c, order, order_weights, locks)


class MiniCaches:
    """One weighted LRU per capacity (in pages), each holding at most `max_keys` keys."""

    def __init__(self, capacities, max_keys: int) -> None:
        n = len(capacities)
        slots = max_keys + 1
        cells = 1 << max(int(2 * max_keys - 1).bit_length(), 1)  # load <= 1/2 at the bound
        self.max_keys = max_keys
        self.mask = cells - 1
        self.capacity = np.asarray(capacities, dtype=np.float64)
        # slot ids; 2 B a cell when they fit (the table is the randomly read part: small
        # keeps it in cache between requests)
        table_type = np.int16 if slots <= np.iinfo(np.int16).max else np.int32
        self.table = np.full((n, cells), _EMPTY, dtype=table_type)
        self.keys = np.zeros((n, slots), dtype=np.uint64)
        self.weights = np.zeros((n, slots), dtype=np.float64)
        self.newer = np.full((n, slots), _EMPTY, dtype=np.int32)
        self.older = np.full((n, slots), _EMPTY, dtype=np.int32)
        self.head = np.full(n, _EMPTY, dtype=np.int32)
        self.tail = np.full(n, _EMPTY, dtype=np.int32)
        self.free = np.tile(np.arange(slots - 1, -1, -1, dtype=np.int32), (n, 1))
        self.n_free = np.full(n, slots, dtype=np.int64)
        self.held = np.zeros(n, dtype=np.float64)
        self.count = np.zeros(n, dtype=np.int64)
        self.capped = np.zeros(n, dtype=np.bool_)
        self.locks = np.zeros((n, slots), dtype=np.int32)  # pins per slot (whatif_events.py)
        self._runs = np.zeros(n, dtype=np.int64)
        # compile (or load numba's on-disk cache) now, at the plugin's attach, rather than
        # in the scheduler's first step: about 2 s cold here, 0.4 s cached
        self.hit_runs(np.empty(0, dtype=np.uint64))
        self.touch(np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float64))

    def kernel_args(self) -> tuple:
        """The arrays a compiled caller passes on to `_match_all` / `_touch_all` (in
        instrument/whatif_kernel.py's order: runs, then the touch arguments)."""
        return (self._runs, self.table, self.keys, self.weights, self.newer, self.older,
                self.head, self.tail, self.free, self.n_free, self.held, self.count,
                self.capped, self.capacity, self.max_keys, self.mask, self.locks)

    def hit_runs(self, sampled: np.ndarray) -> np.ndarray:
        """Per scale, how many of `sampled` (uint64 keys, in prompt order) lead in it."""
        _match_all(self.table, self.keys, self.mask, sampled, self._runs)
        return self._runs

    def touch(self, order: np.ndarray, order_weights: np.ndarray) -> None:
        """Touch `order` (uint64 keys, oldest first) with their weights in every scale."""
        _touch_all(self.table, self.keys, self.weights, self.newer, self.older, self.head,
                   self.tail, self.free, self.n_free, self.held, self.count, self.capped,
                   self.capacity, self.max_keys, self.mask, order, order_weights, self.locks)

"""LRU stack distances of a request-structured page stream: one pass, every cache size.

Mattson et al. (1970): under LRU, a page is resident in a cache of C pages exactly when
fewer than C distinct other pages were used more recently (its stack distance d < C). One
pass gives d for every access, hence hit or miss at every size at once.

A request is one step of a radix prefix cache (SGLang's match, then its inserts):

  1. match: every page of the request is looked up at once, before anything moves;
  2. insert: its pages are touched deepest first (output pages, then the prompt from its
     last page back to its first), so a parent is always more recent than its child. That
     is what SGLang's leaf eviction does: a node is evicted only after its children, so a
     page LRU whose order puts children behind parents keeps exactly the tree's pages.

    request r: pages p0 p1 p2 | o0 o1      lookups: p0 p1 p2 (o0 o1 are new)
               touches, oldest first:      o1 o0 p2 p1 p0      (p0 ends most recent)

Hence along a prompt d(p0) < d(p1) < ...: the hit length at size C is the number of
leading pages with d < C, the radix match's "stop at the first miss".

The pass keeps a Fenwick tree over touch positions with a 1 at each page's latest touch:
d = (marked) - (marked at or before the page's latest touch). O(N log N), compiled with
numba; about 1.5 s per million accesses here. A first touch has distance `COLD` (the int64
maximum, larger than every size): no -1 sentinel leaves this module.
"""

from __future__ import annotations

import numpy as np
from numba import njit

COLD = np.iinfo(np.int64).max  # a first touch: misses at every finite size


@njit(cache=True, nogil=True)
def _distances(keys: np.ndarray, starts: np.ndarray, n_keys: int) -> np.ndarray:  # pragma: no cover
    n = len(keys)
    last = np.full(n_keys, -1, dtype=np.int64)
    tree = np.zeros(n + 1, dtype=np.int32)  # Fenwick over touch positions, 1-based
    out = np.empty(n, dtype=np.int64)
    marked = 0
    position = 0
    for r in range(len(starts) - 1):
        first, end = starts[r], starts[r + 1]
        for a in range(first, end):  # 1. match: look up, move nothing
            previous = last[keys[a]]
            if previous < 0:
                out[a] = COLD
            else:
                below = 0
                i = previous + 1
                while i > 0:
                    below += tree[i]
                    i -= i & -i
                out[a] = marked - below
        for a in range(end - 1, first - 1, -1):  # 2. insert: deepest first
            key = keys[a]
            previous = last[key]
            if previous >= 0:
                i = previous + 1
                while i <= n:
                    tree[i] -= 1
                    i += i & -i
                marked -= 1
            i = position + 1
            while i <= n:
                tree[i] += 1
                i += i & -i
            marked += 1
            last[key] = position
            position += 1
    return out


def stack_distances(keys: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The stack distance of every access at its request's match, in pages. Request r's
    accesses are keys[starts[r]:starts[r+1]] (any integers; equal = the same page), in
    prompt order. Returns int64, `COLD` for a first touch. Pure."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return np.empty(0, dtype=np.int64)
    _, dense = np.unique(keys, return_inverse=True)
    dense = dense.astype(np.int64, copy=False).reshape(-1)
    return _distances(dense, np.asarray(starts, dtype=np.int64), int(dense.max()) + 1)


@njit(cache=True, nogil=True)
def _prefix_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:  # pragma: no cover
    out = np.empty_like(values)
    for r in range(len(starts) - 1):
        running = np.int64(0)
        for i in range(starts[r], starts[r + 1]):
            if values[i] > running:
                running = values[i]
            out[i] = running
    return out


def prefix_max(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running maximum of `values` restarted at each request (segments as in
    `stack_distances`). Distances along a prompt already rise; this makes "stop at the
    first miss" hold even for a stream whose pages are not prefix-closed."""
    return _prefix_max(np.asarray(values, dtype=np.int64), np.asarray(starts, dtype=np.int64))

"""The what-if shadow's per-request work (instrument/whatif.py), compiled, in two parts:

    at the request's match   `sample_tokens` / `sample_pages`: the prompt's page keys and
                             their depth-stratified spatial sample (one call, no numpy
                             temporaries); only the sampled keys are kept, in a buffer
    in batches (`fold`)      every buffered request and finish, in arrival order: the hit run
                             of every mini-cache, the hit weights, the inserts
                             (instrument/whatif_lru.py); one call for the whole batch

Folding in batches gives the same mini-cache contents and the same hit sums as folding each
request at once (the same operations in the same order); the shadow folds before its curve
is read, so every served figure is unchanged. What it saves is memory traffic: the mini-caches
(6.75 MiB at the default bound) are cold after each engine step, and touching them once per request cost about
100 us of cache misses in the scheduler's thread (bench_plugin); in a batch they stay warm.

The arithmetic is the numpy form's, step for step (so the same curve, bit for bit;
tests/unit/test_whatif_kernel.py holds it to a copy of that form):

    keys     H_k = sum_{m<=k} B^(m p) sum_{i<p} t_(m p + i) B^i   (PrefixHasher.token_hashes;
             uint64 wraps, so the order of the sums does not matter) ^ namespace, top bit clear
    sample   pages 0 .. full-1 always (weight 1); a deeper page when splitmix64(key ^ salt)'s
             low 24 bits are under the rate's threshold (weight 1 / rate)
    counted  a sampled page's weight if it is matchable (index < floor((S-1)/P)), else 0
    hits_c   counted summed over the hit run of scale c, left to right (float sums in the
             order of Python's sum over the list)
    touch    output pages (given, deepest first), then the sampled prompt pages deepest first

Cost: docs/curve.md (benchmarks/bench_plugin.py). Releases the GIL (nogil), like the
mini-caches' kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine_adapter.instrument.whatif_lru import _match_all, _touch_all

SAMPLE_BITS = 24  # the sampling hash's bits compared with rate x 2^24
_SAMPLE_MASK = (1 << SAMPLE_BITS) - 1
_PROMPT_MASK = (1 << 63) - 1  # prompt keys: the top bit clear (output keys have it set)


@njit(cache=True, nogil=True)
def token_keys(tokens, page, powers, page_powers, namespace, out, h):
    """out[k] = (H_k ^ namespace) with the top bit clear, for each full page k of `tokens`
    (uint64). powers: B^0 .. B^(p-1); page_powers: B^(k p) for k < len(out). Returns the
    last H unmasked: given back as `h` with `tokens` the pages after it and page_powers
    from their index, the chain goes on where it stopped (0: from the sequence's start)."""
    for k in range(len(out)):
        term = np.uint64(0)
        base = k * page
        for i in range(page):
            term += tokens[base + i] * powers[i]
        h += term * page_powers[k]
        out[k] = (h ^ namespace) & np.uint64(_PROMPT_MASK)
    return h


@njit(cache=True, nogil=True)
def _sample_hash(key, salt):
    """splitmix64's finalizer of the salted key, low 24 bits (SHARDS' spatial hash)."""
    z = key ^ salt
    z += np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z & np.uint64(_SAMPLE_MASK)


@njit(cache=True, nogil=True)
def sample_pages(keys, matchable, full_depth, salt, threshold, weight):
    """(sampled keys in prompt order, their counted weights, the counted total, how many of
    them are full-depth pages) of a prompt's page keys (top bit clear): pages below
    `full_depth` always, deeper ones in the sample."""
    n = len(keys)
    full = min(full_depth, n)
    sampled = np.empty(n, dtype=np.uint64)
    counted = np.empty(n, dtype=np.float64)
    m = 0
    for i in range(n):
        key = keys[i]
        if i >= full and _sample_hash(key, salt) >= threshold:
            continue
        sampled[m] = key
        page_weight = 1.0 if i < full else weight
        counted[m] = page_weight if i < matchable else 0.0
        m += 1
    total = 0.0
    for j in range(m):
        total += counted[j]
    return sampled[:m].copy(), counted[:m].copy(), total, full


@njit(cache=True, nogil=True)
def sample_tokens(tokens, page, powers, page_powers, namespace, matchable, full_depth, salt,
                  threshold, weight):
    """`sample_pages` of the page keys of `tokens` (uint64 ids; `token_keys`)."""
    keys = np.empty(len(tokens) // page, dtype=np.uint64)
    token_keys(tokens, page, powers, page_powers, namespace, keys, np.uint64(0))
    return sample_pages(keys, matchable, full_depth, salt, threshold, weight)


@njit(cache=True, nogil=True)
def fold(sampled, counted, starts, fulls, out_keys, out_weights, out_starts, weight, hits,
         runs, table, ckeys, cweights, newer, older, head, tail, free, n_free, held, count,
         capped, capacity, max_keys, mask, locks):
    """Apply buffered operations i = 0 .. len(fulls)-1 in order. Operation i: the sampled
    prompt keys sampled[starts[i]:starts[i+1]] (empty for a finish) with their counted
    weights, of which the first fulls[i] are full-depth pages; its output pages
    out_keys[out_starts[i]:out_starts[i+1]] (deepest first). Per operation: every lookup
    first (hits[c] += the counted weight of scale c's hit run), then the output pages, then
    the prompt's sampled pages deepest first (a parent ends more recent than its child)."""
    order = np.empty(len(sampled), dtype=np.uint64)
    order_weights = np.empty(len(sampled), dtype=np.float64)
    for i in range(len(fulls)):
        s, e, full = starts[i], starts[i + 1], fulls[i]
        _match_all(table, ckeys, mask, sampled[s:e], runs)
        for c in range(len(runs)):
            run_weight = 0.0
            for j in range(s, s + runs[c]):
                run_weight += counted[j]
            hits[c] += run_weight
        o, oe = out_starts[i], out_starts[i + 1]
        if oe > o:
            _touch_all(table, ckeys, cweights, newer, older, head, tail, free, n_free, held,
                       count, capped, capacity, max_keys, mask, out_keys[o:oe],
                       out_weights[o:oe], locks)
        m = e - s
        for j in range(m):
            order[j] = sampled[e - 1 - j]
            order_weights[j] = weight if m - 1 - j >= full else 1.0
        _touch_all(table, ckeys, cweights, newer, older, head, tail, free, n_free, held, count,
                   capped, capacity, max_keys, mask, order[:m], order_weights[:m], locks)

"""One request of the what-if shadow (instrument/whatif.py) in one compiled call: the prompt's
page keys, the depth-stratified spatial sample, the hit run of every mini-cache and its
hit weight, and the inserts (instrument/whatif_lru.py), with no per-request numpy
temporaries and no Python between the steps.

The same arithmetic as the numpy form it replaced, step for step (so the same curve, bit for
bit; tests/unit/test_whatif_kernel.py holds it to a copy of that form):

    keys     H_k = sum_{m<=k} B^(m p) sum_{i<p} t_(m p + i) B^i   (PrefixHasher.token_hashes;
             uint64 wraps, so the order of the sums does not matter) ^ namespace, top bit clear
    sample   pages 0 .. full-1 always (weight 1); a deeper page when splitmix64(key ^ salt)'s
             low 24 bits are under the rate's threshold (weight 1 / rate)
    counted  a sampled page's weight if it is matchable (index < floor((S-1)/P)), else 0
    hits_c   counted summed over the hit run of scale c, left to right (float sums in the
             order of Python's sum over the list)
    touch    output pages (given, deepest first), then the sampled prompt pages deepest first

Cost (benchmarks/bench_plugin.py, first 200 Mooncake requests of 14k tokens): see
docs/curve.md; the per-request work was about 200 us of numpy calls and Python lists.
Releases the GIL (nogil), like the mini-caches' kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine_adapter.instrument.whatif_lru import _match_all, _touch_all

SAMPLE_BITS = 24  # the sampling hash's bits compared with rate x 2^24
_SAMPLE_MASK = (1 << SAMPLE_BITS) - 1
_PROMPT_MASK = (1 << 63) - 1  # prompt keys: the top bit clear (output keys have it set)


@njit(cache=True, nogil=True)
def token_keys(tokens, page, powers, page_powers, namespace, out):
    """out[k] = (H_k ^ namespace) with the top bit clear, for each full page k of `tokens`
    (uint64). powers: B^0 .. B^(p-1); page_powers: B^(k p) for k < len(out)."""
    h = np.uint64(0)
    for k in range(len(out)):
        term = np.uint64(0)
        base = k * page
        for i in range(page):
            term += tokens[base + i] * powers[i]
        h += term * page_powers[k]
        out[k] = (h ^ namespace) & np.uint64(_PROMPT_MASK)


@njit(cache=True, nogil=True)
def _sample_hash(key, salt):
    """splitmix64's finalizer of the salted key, low 24 bits (WhatIfShadow._hashed)."""
    z = key ^ salt
    z += np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z & np.uint64(_SAMPLE_MASK)


@njit(cache=True, nogil=True)
def observe_keys(keys, matchable, full_depth, salt, threshold, weight, out_keys, out_weights,
                 hit_weights, runs, table, ckeys, cweights, newer, older, head, tail, free,
                 n_free, held, count, capped, capacity, max_keys, mask):
    """One request (module docstring): sets hit_weights[c] to scale c's hit weight and
    returns the request's sampled matchable weight. `keys` have the top bit clear."""
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
    sampled = sampled[:m]
    _match_all(table, ckeys, mask, sampled, runs)  # every lookup before any insert
    for c in range(len(runs)):
        run_weight = 0.0
        for j in range(runs[c]):
            run_weight += counted[j]
        hit_weights[c] = run_weight
    if len(out_keys):
        _touch_all(table, ckeys, cweights, newer, older, head, tail, free, n_free, held, count,
                   capped, capacity, max_keys, mask, out_keys, out_weights)
    order = np.empty(m, dtype=np.uint64)
    order_weights = np.empty(m, dtype=np.float64)
    for j in range(m):  # deepest first: a parent ends more recent than its child
        order[j] = sampled[m - 1 - j]
        order_weights[j] = weight if m - 1 - j >= full else 1.0
    _touch_all(table, ckeys, cweights, newer, older, head, tail, free, n_free, held, count,
               capped, capacity, max_keys, mask, order, order_weights)
    return total

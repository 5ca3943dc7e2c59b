"""The what-if shadow driven by the cache's own events (instrument/whatif.py `admit` ..
`unlock`), compiled: the kernels that apply one event to every mini-cache.

SGLang decides a request's hit when it matches, not when it arrives, and the pool it
matches against also holds what running requests hold (ledger.py: protected + private):

    event (SGLang 0.5.23)                        per scale c (capacity = s x pool - private)
    match at admission (PrefillAdder)            hit run = leading sampled pages cached in c
                                                 (hits_c += their counted weight); pin them
    checkpoint_kv_cache after a prefill chunk    pin the prompt's sampled pages below the
                                                 prefilled length (new keys enter pinned)
    release_kv_cache at the finish               pin the whole prompt, insert the output
                                                 pages, unpin all (they join the recent end:
                                                 the insert stamps the path); a retained
                                                 turn keeps its pins until `unlock`
    (a retention lease released, a retraction)   unpin

A pinned page is in the tree (a later request can hit it) but cannot be evicted (SGLang's
lock_ref); eviction takes the least recent unpinned page while the weight held exceeds the
capacity, whose private part (running requests' KV outside the tree) the engine reports at
each event. Requests admitted in one step are matched before any of them is inserted, so
they cannot hit each other (the feeds emit a step's admissions first).

Each scale's hit run is found from the first page (the scales need not nest once pins
differ between them). Arrays are MiniCaches.kernel_args()'s (whatif_lru.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine_adapter.instrument.whatif_kernel import _sample_hash
from engine_adapter.instrument.whatif_lru import _evict, _match, _pin, _touch, _unpin


@njit(cache=True, nogil=True)
def sample_depths(keys, full_depth, salt, threshold):
    """Page indices of the sampled pages of a prompt's keys, in order: the first
    `full_depth` always, a deeper one when its sampling hash is under the threshold
    (whatif_kernel.sample_pages' rule)."""
    n = len(keys)
    out = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if i >= full_depth and _sample_hash(keys[i], salt) >= threshold:
            continue
        out[m] = i
        m += 1
    return out[:m].copy()


@njit(cache=True, nogil=True)
def _fit(base, reserved, table, keys, weights, newer, older, head, tail, free, n_free, held,
         count, capped, capacity, max_keys, mask):
    """Capacity of every scale = base - reserved pages (at least 0); evict to fit it."""
    for c in range(len(held)):
        capacity[c] = max(base[c] - reserved, 0.0)
        _evict(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
               capped, capacity, max_keys, mask, c)


@njit(cache=True, nogil=True)
def ev_admit(sampled, counted, host_run, lookup, pinned, hits, base, reserved, runs, table, keys,
             weights, newer, older, head, tail, free, n_free, held, count, capped, capacity,
             max_keys, mask, locks):
    """A request matched: per scale its hit run (at least `host_run` sampled pages when a
    host tier returns them), the counted weight of the run added to hits, the cached part
    of the run pinned (pinned[c] = how many leading sampled pages it pins). lookup False:
    the engine never consulted the tree (an unauthorized read): no hit, nothing pinned."""
    _fit(base, reserved, table, keys, weights, newer, older, head, tail, free, n_free, held,
         count, capped, capacity, max_keys, mask)
    for c in range(len(held)):
        run = _match(table, keys, c, mask, sampled, 0) if lookup else 0
        counted_run = max(run, host_run)
        total = 0.0
        for j in range(counted_run):
            total += counted[j]
        hits[c] += total
        _pin(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
             capped, mask, c, sampled[:run], counted[:run], locks)
        pinned[c] = run


@njit(cache=True, nogil=True)
def ev_insert(sampled, touch_weights, upto, pinned, base, reserved, table, keys, weights,
              newer, older, head, tail, free, n_free, held, count, capped, capacity,
              max_keys, mask, locks):
    """The first `upto` sampled prompt pages are in the tree now, pinned by the request."""
    for c in range(len(held)):
        if pinned[c] < upto:
            _pin(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
                 capped, mask, c, sampled[pinned[c]:upto], touch_weights[pinned[c]:upto],
                 locks)
            pinned[c] = upto
    _fit(base, reserved, table, keys, weights, newer, older, head, tail, free, n_free, held,
         count, capped, capacity, max_keys, mask)


@njit(cache=True, nogil=True)
def ev_release(sampled, touch_weights, pinned, out_keys, out_weights, out_pinned, retain,
               base, reserved, table, keys, weights, newer, older, head, tail, free, n_free,
               held, count, capped, capacity, max_keys, mask, locks):
    """The request finished (retain False: its path becomes evictable) or its lease or
    retraction let go of it (call with pinned as left and out_pinned True). The whole
    prompt is inserted first; the output pages (deepest first) join the recent end, then
    the prompt's pages deepest first (a parent ends more recent than its child)."""
    m = len(sampled)
    order = sampled[::-1].copy()
    for c in range(len(held)):
        if pinned[c] < m:
            _pin(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
                 capped, mask, c, sampled[pinned[c]:], touch_weights[pinned[c]:], locks)
            pinned[c] = m
        if retain:
            if not out_pinned:
                _pin(table, keys, weights, newer, older, head, tail, free, n_free, held,
                     count, capped, mask, c, out_keys, out_weights, locks)
            continue
        if out_pinned:
            _unpin(table, keys, newer, older, head, tail, mask, c, out_keys, locks)
        else:
            _touch(table, keys, weights, newer, older, head, tail, free, n_free, held, count,
                   capped, capacity, max_keys, mask, c, out_keys, out_weights, locks)
        _unpin(table, keys, newer, older, head, tail, mask, c, order, locks)
        pinned[c] = 0
    _fit(base, reserved, table, keys, weights, newer, older, head, tail, free, n_free, held,
         count, capped, capacity, max_keys, mask)


_NO_KEYS, _NO_WEIGHTS = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float64)
_ZERO_KEY = np.uint64(0)


class _Running:
    """A request the shadow holds pins for: its sampled prompt pages (keys in prompt order,
    counted and touch weights, page indices), pins per scale, retained output pages."""

    __slots__ = ("sampled", "counted", "touch", "depths", "pinned", "out_keys", "out_weights",
                 "out_pinned", "ids")

    def __init__(self, sampled, counted, touch, depths, scales: int) -> None:
        self.sampled, self.counted, self.touch, self.depths = sampled, counted, touch, depths
        self.pinned = np.zeros(scales, dtype=np.int64)
        self.out_keys, self.out_weights, self.out_pinned = _NO_KEYS, _NO_WEIGHTS, False
        # (prompt token ids as uint64, namespace hash, chain after its full pages): outputs
        # keyed by the real sequence, hashed on from the prompt's chain
        self.ids = None


class EventLog:
    """The event-driven shadow's buffered events and the requests it holds pins for.
    Events are applied in order at `apply` (WhatIfShadow.flush); a request's pages are
    hashed and sampled when its admission is applied. Memory: the events not applied yet
    (bounded like the shadow's fold buffer) and one _Running per request admitted and not
    yet released (running requests and retained turns)."""

    def __init__(self, shadow) -> None:
        self.shadow = shadow
        self.pending: list[tuple] = []
        self.running: dict = {}
        self.base = np.asarray(shadow._caches.capacity, dtype=np.float64).copy()
        self._scratch_runs = np.zeros(len(self.base), dtype=np.int64)

    def warm_up(self) -> None:
        """Compile (or load) the event kernels now, with no effect on the state."""
        sh, args = self.shadow, self.shadow._caches.kernel_args()[1:]
        empty = np.empty(0, dtype=np.uint64)
        sample_depths(empty, sh.full_depth_pages, sh._salt, sh._threshold)
        pinned = np.zeros(len(self.base), dtype=np.int64)
        ev_admit(empty, _NO_WEIGHTS, 0, True, pinned, np.zeros(len(self.base)), self.base, 0.0,
                 self._scratch_runs, *args)
        ev_insert(empty, _NO_WEIGHTS, 0, pinned, self.base, 0.0, *args)
        for out_pinned, retain in ((False, False), (False, True), (True, False)):
            ev_release(empty, _NO_WEIGHTS, pinned, empty, _NO_WEIGHTS, out_pinned, retain,
                       self.base, 0.0, *args)

    def apply(self) -> None:
        pending, self.pending = self.pending, []
        sh = self.shadow
        args = sh._caches.kernel_args()[1:]  # runs excluded
        page = sh.page_size
        for event in pending:
            kind, rid, reserved = event[0], event[1], event[2] / page
            if kind == "admit":
                self._admit(rid, reserved, *event[3:], args)
                continue
            if kind == "flush":  # every unpinned page leaves (capacity 0 for a moment)
                _fit(self.base, np.inf, *args[:-1])
                continue
            req = self.running.get(rid)
            if req is None:  # admitted before the shadow started, or released already
                continue
            if kind == "insert":
                upto = int(np.searchsorted(req.depths, event[3] // page))
                ev_insert(req.sampled, req.touch, upto, req.pinned, self.base, reserved, *args)
            elif kind == "finish":
                retain = event[4]
                if not req.out_pinned:
                    req.out_keys, req.out_weights = self._outputs(req, *event[3])
                ev_release(req.sampled, req.touch, req.pinned, req.out_keys, req.out_weights,
                           req.out_pinned, retain, self.base, reserved, *args)
                if retain:
                    req.out_pinned = True
                else:
                    del self.running[rid]
            elif kind == "unlock":  # a retained turn's lease let go
                if req.out_pinned:
                    ev_release(req.sampled, req.touch, req.pinned, req.out_keys,
                               req.out_weights, True, False, self.base, reserved, *args)
                    del self.running[rid]

    def _outputs(self, req: _Running, prompt: int, output: int, output_ids):
        """The sampled pages SGLang inserts past the prompt's full pages at the finish
        (committed length S + O - 1), deepest first: keyed by the real sequence when the
        prompt came as token ids and the output ids are given (a next turn that carries
        the output hits them), else fresh keys (WhatIfShadow._outputs)."""
        sh = self.shadow
        if req.ids is None or output_ids is None:
            return sh._outputs(prompt, output)
        ids, ns, chain = req.ids
        first = prompt // sh.page_size  # the first page past the prompt's full pages
        outs = np.ascontiguousarray(output_ids, dtype=np.int64).view(np.uint64)
        # committed length S + O - 1; only the pages from `first` on are hashed, the chain
        # carried from the prompt's (whatif_kernel.token_keys)
        tail = np.concatenate((ids[first * sh.page_size:], outs))
        tail = tail[:max(prompt + len(outs) - 1 - first * sh.page_size, 0)]
        keys, _ = sh._token_keys(tail, ns, first_page=first, chain=chain)
        depths = sample_depths(keys, sh.full_depth_pages - first, sh._salt, sh._threshold)
        weights = np.where(depths + first < sh.full_depth_pages, 1.0, sh._weight)
        return keys[depths][::-1].copy(), weights[::-1].copy()

    def _admit(self, rid, reserved: float, work, matchable: int, host_pages: int,
               lookup: bool, args) -> None:
        sh = self.shadow
        chain = _ZERO_KEY
        if isinstance(work, np.ndarray):
            keys = work
        else:
            keys, chain = sh._token_keys(*work)
        depths = sample_depths(keys, sh.full_depth_pages, sh._salt, sh._threshold)
        sampled = keys[depths]
        full = depths < sh.full_depth_pages
        touch = np.where(full, 1.0, sh._weight)
        counted = np.where(depths < matchable, touch, 0.0)
        sh.sampled_matchable_weight += float(counted.sum())
        host_run = int(np.searchsorted(depths, host_pages))
        req = _Running(sampled, counted, touch, depths, len(self.base))
        if not isinstance(work, np.ndarray):
            req.ids = (*work, chain)
        old = self.running.pop(rid, None)
        if old is not None and old.out_pinned:  # a rid reused while its lease is held
            ev_release(old.sampled, old.touch, old.pinned, old.out_keys, old.out_weights,
                       True, False, self.base, reserved, *args)
        ev_admit(sampled, counted, host_run, lookup, req.pinned, sh._hits, self.base, reserved,
                 self._scratch_runs, *args)
        self.running[rid] = req

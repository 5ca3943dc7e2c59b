"""Stack distances in a replay's event order: matches at admission, pages pinned while a
request runs, prompts inserted when their prefill is done, release at finish, and the
scheduler's waiting-prefix refreshes.

The arrival-order pass (distance.py) sees each request alone, at once. A replay runs many
requests together (SGLang's scheduler, up to 256 running): a request is matched when it is
admitted, its prompt reaches the tree when its prefill is done, its whole sequence when it
finishes, and until then its pages are locked. The events of one replay (schedule.py), in
its order, drive the same Fenwick pass with a pinned set and a count of private pages:

    MATCH r    r's matchable pages looked up (nothing moves), then its prompt pages
               pinned: off the stack, into the pinned set (a refcount per page)
    PROMPT r   r's prompt is in the tree: its pinned pages are matchable by anyone; its
               output pages start to take room (private: in no tree yet)
    FINISH r   r's pages leave the pinned set deepest first (output pages, then the
               prompt from its last page back), each onto the top of the stack
    REFRESH w  w's matched prefix touched (SGLang's match_prefix on a waiting request)

    distance of an unpinned page X = (unpinned pages touched since X)     Fenwick
                                   + (pinned pages)                       `pinned`
                                   + (running requests' output pages)     `private`

A pool of C pages holds the running requests' pages first (they cannot be evicted), so a
hit at C iff distance < C. A pinned page is resident as long as it is pinned, and
matchable once it is in the tree:

    pinned, a holder's prompt done (in the tree)     distance 0
    pinned, no holder's prompt done yet              the distance its first holder matched
                                                     it at: in the tree at the sizes that
                                                     holder hit it; COLD where that holder
                                                     computed it (one batch cannot hit
                                                     its own new pages)

A touch that SGLang makes only where a page is resident (a match, a refresh) is a touch at
the sizes where it hit: the page keeps a floor, the distance it was matched at, below
which it is not resident (`floor`). Pure; compiled with numba.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from kvctl.replay.curve.distance import COLD

PROMPT, FINISH, REFRESH, MATCH = 0, 1, 2, 3  # at one instant: a step's results, then the
# next round's waiting-prefix refresh (calc_priority), then its admissions


@njit(cache=True, nogil=True)
def _add(tree: np.ndarray, index: int, delta: int) -> None:  # pragma: no cover
    i = index + 1
    n = len(tree) - 1
    while i <= n:
        tree[i] += delta
        i += i & -i


@njit(cache=True, nogil=True)
def _below(tree: np.ndarray, index: int) -> int:  # pragma: no cover
    """Marks at positions <= index."""
    total = 0
    i = index + 1
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@njit(cache=True, nogil=True)
def _event_distances(keys, starts, prompt_pages, matchable, kinds, requests, n_keys,
                     n_positions):  # pragma: no cover
    n = len(keys)
    last = np.full(n_keys, -1, dtype=np.int64)  # stack position; -1: none (or pinned)
    floor = np.zeros(n_keys, dtype=np.int64)  # resident only at sizes above this
    pins = np.zeros(n_keys, dtype=np.int32)
    stack = np.zeros(n_positions + 1, dtype=np.int32)  # Fenwick: a 1 at each latest touch
    out = np.full(n, COLD, dtype=np.int64)
    marked = 0
    position = 0
    pinned = 0
    private = 0
    peak = 0  # the most pages running requests held at once
    for e in range(len(kinds)):
        kind = kinds[e]
        r = requests[e]
        first = starts[r]
        end = starts[r + 1]
        prompt_end = first + prompt_pages[r]
        match_end = first + matchable[r]
        if kind == MATCH or kind == REFRESH:
            # look up, moving nothing; the prefix maximum is the match's "stop at the first miss"
            running = np.int64(0)
            for a in range(first, match_end):
                key = keys[a]
                if pins[key] > 0:
                    d = floor[key]
                elif last[key] >= 0:
                    d = max(floor[key], marked - _below(stack, last[key]) + pinned + private)
                else:
                    d = COLD
                running = max(running, d)
                out[a] = running
            if kind == REFRESH:  # touch what matched (SGLang's match_prefix), head last
                for a in range(match_end - 1, first - 1, -1):
                    key = keys[a]
                    if out[a] == COLD or pins[key] > 0:
                        continue
                    _add(stack, last[key], -1)
                    _add(stack, position, 1)
                    last[key] = position
                    floor[key] = out[a]
                    position += 1
                for a in range(first, match_end):
                    out[a] = COLD  # a refresh is no request's match
                continue
            for a in range(first, prompt_end):  # pin the prompt: off the stack
                key = keys[a]
                if pins[key] == 0:
                    if last[key] >= 0:
                        _add(stack, last[key], -1)
                        marked -= 1
                        last[key] = -1
                    pinned += 1
                    # in the tree at the sizes it hit at; below them this request's own copy
                    # until its PROMPT, which no one else can match
                    floor[key] = out[a] if a < match_end else COLD
                pins[key] += 1
            peak = max(peak, pinned + private)
        elif kind == PROMPT:  # the prompt is in the tree; outputs start taking room
            for a in range(first, prompt_end):
                floor[keys[a]] = 0
            private += end - prompt_end
            peak = max(peak, pinned + private)
        else:  # FINISH: released deepest first, so a parent ends more recent than its child
            private -= end - prompt_end
            for a in range(end - 1, first - 1, -1):
                key = keys[a]
                if a < prompt_end:
                    pins[key] -= 1
                    if pins[key] > 0:
                        continue
                    pinned -= 1
                elif last[key] >= 0:
                    _add(stack, last[key], -1)
                    marked -= 1
                _add(stack, position, 1)
                marked += 1
                last[key] = position
                floor[key] = 0
                position += 1
    return out, peak


class EventDistances(NamedTuple):
    distances: np.ndarray  # int64 per access; COLD where no match can hit
    peak_held_pages: int  # the most pages the running requests held at once


def event_distances(keys: np.ndarray, starts: np.ndarray, prompt_pages: np.ndarray,
                    matchable: np.ndarray, kinds: np.ndarray, requests: np.ndarray
                    ) -> EventDistances:
    """The distance of every matchable access at its request's MATCH, in pages, under the
    event order (`kinds[i]` of `requests[i]`: each scheduled request's MATCH, PROMPT and
    FINISH once, in that order, and any REFRESH while it waits). Request r's accesses are
    keys[starts[r]:starts[r+1]]: its `prompt_pages[r]` full prompt pages (the first
    `matchable[r]` matchable), then its output pages. Distances are prefix maxima along
    each request (a match stops at its first miss); `COLD` where no match can hit (a first
    touch, a page only a running request has computed, an output page, a request never
    matched). Pure."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return EventDistances(np.empty(0, dtype=np.int64), 0)
    _, dense = np.unique(keys, return_inverse=True)
    dense = dense.astype(np.int64, copy=False).reshape(-1)
    out, peak = _event_distances(
        dense, np.asarray(starts, dtype=np.int64), np.asarray(prompt_pages, dtype=np.int64),
        np.asarray(matchable, dtype=np.int64), np.asarray(kinds, dtype=np.int8),
        np.asarray(requests, dtype=np.int64), int(dense.max()) + 1,
        _positions(kinds, requests, starts, matchable))
    return EventDistances(out, int(peak))


def _positions(kinds, requests, starts, matchable) -> int:
    """Stack positions the pass uses: a FINISH touches its request's pages, a REFRESH at
    most its matchable ones; nothing else touches the stack."""
    kinds = np.asarray(kinds)
    requests = np.asarray(requests, dtype=np.int64)
    sizes = np.diff(np.asarray(starts, dtype=np.int64))
    finished = int(sizes[requests[kinds == FINISH]].sum())
    refreshed = int(np.asarray(matchable, dtype=np.int64)[requests[kinds == REFRESH]].sum())
    return finished + refreshed + 1

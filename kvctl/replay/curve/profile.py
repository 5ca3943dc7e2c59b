"""A hit-rate curve: the token hit rate at every pool size, from one stack-distance pass.

    hit tokens(C pages) = sum over requests of P * #{leading matchable pages whose prefix
                          maximum stack distance < C}          (distance.py, stream.py)
    H(C)                = hit tokens(C) / prompt tokens        (seed 003 eq. (2), H_prefix)

It assumes LRU over pages (SGLang's `--radix-eviction-policy lru`, leaf eviction; a parent
is never older than its child, so leaf eviction keeps what a page LRU keeps) and no other
claims on the pool: running requests' pages, which SGLang pins, and leaf nodes evicted
whole are not modeled. Every output says so; `--verify-points` measures the error.

The prompt tokens split three ways, at an unbounded pool:

    prompt = ceiling hits + compulsory misses (first touches) + uncacheable (the S-1 cap
             and the partial last page: tokens no match can ever return)

The sampled estimate of the same curve, for a live engine, is
engine_adapter.instrument.whatif (SHARDS-style, depth-stratified).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvctl.replay.curve.distance import COLD, prefix_max, stack_distances
from kvctl.replay.curve.stream import PageStream

LRU_ASSUMPTION = ("curve assumes LRU eviction over pages and a pool holding only cached "
                  "prefixes (running requests' pages and whole-leaf eviction not modeled); "
                  "exact replays measure the error (--verify-points)")


@dataclass(frozen=True, kw_only=True)
class HitCurve:
    """H(C) for every pool size C. `reuse` holds, sorted, the prefix-maximum stack
    distance (pages) of every cacheable page access that is not a first touch; each is one
    page of prompt tokens."""

    page_size: int
    prompt_tokens: int
    reuse: np.ndarray  # sorted ascending
    compulsory_tokens: int  # first touches within the cap
    accesses: int  # page accesses in the stream

    @property
    def ceiling(self) -> float:
        """H with an unbounded pool."""
        return len(self.reuse) * self.page_size / self.prompt_tokens

    @property
    def compulsory_share(self) -> float:
        return self.compulsory_tokens / self.prompt_tokens

    @property
    def uncacheable_share(self) -> float:
        return max(0.0, 1.0 - self.ceiling - self.compulsory_share)

    def hit_rate(self, pool_tokens: int) -> float:
        """H at a pool of `pool_tokens` (rounded down to whole pages)."""
        pages = pool_tokens // self.page_size
        hits = int(np.searchsorted(self.reuse, pages, side="left"))
        return hits * self.page_size / self.prompt_tokens

    def pool_for(self, share_of_ceiling: float) -> int | None:
        """The smallest pool (tokens) whose H reaches `share_of_ceiling` of the ceiling;
        None for an empty curve."""
        if len(self.reuse) == 0:
            return None
        index = max(math.ceil(share_of_ceiling * len(self.reuse) - 1e-9), 1) - 1
        return (int(math.floor(self.reuse[index])) + 1) * self.page_size

    def points(self, count: int = 64) -> list[tuple[int, float]]:
        """At least `count` log-spaced pool sizes (whole pages, distinct) from one page to
        the size that reaches the ceiling, each with H; every page size when fewer exist."""
        top = max((self.pool_for(1.0) or self.page_size) // self.page_size, 1)
        if top <= count:
            pages = np.arange(1, top + 1)
        else:
            drawn = count
            pages = np.unique(np.geomspace(1, top, drawn).round())
            while len(pages) < count:  # rounding merges the smallest sizes: draw denser
                drawn += count
                pages = np.unique(np.geomspace(1, top, drawn).round())
        return [(int(p) * self.page_size, self.hit_rate(int(p) * self.page_size)) for p in pages]


def build_curve(stream: PageStream) -> HitCurve:
    """The curve of `stream` from every access (the sampled estimate lives in
    engine_adapter.instrument.whatif, for a live engine)."""
    cacheable = _matchable_mask(stream)
    peaks = prefix_max(stack_distances(stream.keys, stream.starts), stream.starts)[cacheable]
    cold = peaks == COLD
    reuse = np.sort(peaks[~cold])
    page = stream.page_size
    return HitCurve(page_size=page, prompt_tokens=stream.prompt_tokens, reuse=reuse,
                    compulsory_tokens=int(cold.sum()) * page, accesses=stream.accesses)


def _matchable_mask(stream: PageStream) -> np.ndarray:
    """True at each access a match may return: request r's first matchable[r] accesses."""
    mask = np.zeros(stream.accesses, dtype=bool)
    lengths = stream.matchable
    if lengths.sum() == 0:
        return mask
    firsts = np.repeat(stream.starts[:-1], lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    mask[firsts + within] = True
    return mask

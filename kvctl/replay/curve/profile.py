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

Sampling (SHARDS, Waldspurger et al., FAST '15): keep the accesses of pages whose salted
hash falls under rate R; a sampled distance d stands for d / R pages; each sampled
matchable page stands for (matchable pages / sampled matchable pages) of them, a ratio
estimator whose denominator is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvctl.replay.curve.distance import COLD, prefix_max, stack_distances
from kvctl.replay.curve.stream import PageStream

SAMPLE_BITS = 24
LRU_ASSUMPTION = ("curve assumes LRU eviction over pages and a pool holding only cached "
                  "prefixes (running requests' pages and whole-leaf eviction not modeled); "
                  "exact replays measure the error (--verify-points)")


@dataclass(frozen=True, kw_only=True)
class HitCurve:
    """H(C) for every pool size C. `reuse` holds, sorted, the (scaled) prefix-maximum
    distance of every cacheable page access that is not a first touch; each stands for
    `tokens_per_entry` prompt tokens."""

    page_size: int
    prompt_tokens: int
    reuse: np.ndarray  # float64, sorted ascending
    tokens_per_entry: float
    compulsory_tokens: float  # first touches within the cap (sampled: estimated)
    accesses: int  # page accesses examined (after sampling)
    sample_rate: float

    @property
    def ceiling(self) -> float:
        """H with an unbounded pool."""
        return len(self.reuse) * self.tokens_per_entry / self.prompt_tokens

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
        return hits * self.tokens_per_entry / self.prompt_tokens

    def pool_for(self, share_of_ceiling: float) -> int | None:
        """The smallest pool (tokens) whose H reaches `share_of_ceiling` of the ceiling;
        None for an empty curve."""
        if len(self.reuse) == 0:
            return None
        index = max(math.ceil(share_of_ceiling * len(self.reuse) - 1e-9), 1) - 1
        return (int(math.floor(self.reuse[index])) + 1) * self.page_size

    def points(self, count: int = 64) -> list[tuple[int, float]]:
        """`count` log-spaced pool sizes from one page to the size that reaches the
        ceiling, each with H."""
        top = self.pool_for(1.0) or self.page_size
        pages = np.unique(np.geomspace(1, max(top // self.page_size, 1), count).round())
        if len(pages) < count:  # few distinct pages: spread linearly instead
            pages = np.unique(np.linspace(1, max(top // self.page_size, count), count).round())
        return [(int(p) * self.page_size, self.hit_rate(int(p) * self.page_size)) for p in pages]


def build_curve(stream: PageStream, *, sample_rate: float = 1.0, salt: int = 0) -> HitCurve:
    """The curve of `stream`, from all accesses (sample_rate 1) or a spatial sample."""
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample rate must be in (0, 1], got {sample_rate}")
    keys, starts = stream.keys, stream.starts
    cacheable = _matchable_mask(stream)
    if sample_rate < 1.0:
        keep = sampled(keys, sample_rate, salt)
        counts = np.add.reduceat(keep.astype(np.int64), starts[:-1]) if len(keys) else keep
        keys, cacheable = keys[keep], cacheable[keep]
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    distances = stack_distances(keys)
    peaks = prefix_max(distances, starts)[cacheable]
    cold = peaks == COLD
    reuse = np.sort(peaks[~cold].astype(np.float64) / sample_rate)
    total_matchable = int(stream.matchable.sum())
    weight = stream.page_size * (total_matchable / max(len(peaks), 1) if sample_rate < 1.0 else 1)
    return HitCurve(page_size=stream.page_size, prompt_tokens=stream.prompt_tokens,
                    reuse=reuse, tokens_per_entry=float(weight),
                    compulsory_tokens=float(cold.sum()) * weight,
                    accesses=len(keys), sample_rate=sample_rate)


def sampled(keys: np.ndarray, rate: float, salt: int) -> np.ndarray:
    """SHARDS' spatial filter: True where splitmix64(key ^ salt) mod 2^24 < rate * 2^24;
    every access of a page is kept or none."""
    threshold = np.uint64(int(rate * (1 << SAMPLE_BITS)))
    return (mix64(keys.astype(np.uint64) ^ np.uint64(salt)) & np.uint64((1 << SAMPLE_BITS) - 1)) < threshold


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        z = values + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


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

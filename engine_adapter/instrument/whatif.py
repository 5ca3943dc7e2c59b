"""The live what-if curve: a sampled shadow of the page-access stream, answering "what
would the token hit rate be if the pool were N x its size?" inside a running engine.

SHARDS-style spatial sampling (Waldspurger et al., FAST '15; fixed-size mini-simulations
as in Waldspurger et al., ATC '17): a page is shadowed when the salted hash of its prefix
key falls under its rate, so every access of a sampled page is seen, and each sampled page
stands for 1 / rate pages (its weight). One LRU mini-cache per pool scale holds sampled
pages up to a weight of scale x pool pages.

Stratified by depth: a prompt's first `full_depth_pages` pages (the shared system prompt
and tool schema of most traffic) are all shadowed (rate 1), deeper pages at `rate`
(default 1%). A prefix cache's hits at small sizes come from a few very hot shallow pages;
sampled at 1% like the rest, one hot page in or out of the sample swings the estimate by
whole percentage points (measured on the shipped Mooncake trace: 0.2% to 12.4% for a true
4.5%). Depth is a function of the key (a page's prefix hash fixes its position), so the
sample is still spatial: a page is always in or always out.

    request: prompt pages 0 .. n-1 (prefix hashes), matchable m = floor((S-1)/P)
    per scale s:  alive = True
                  for each sampled page i (in order): hit = page in cache_s; touch/insert it
                      alive &= hit;  if i < m and alive: hits_s += weight(i)
    H_s = hits_s / sampled_matchable_weight x cacheable share     (ratio estimator)

Prefix semantics: a sampled page counts as a hit only while every sampled page before it
in the request hit (the radix match stops at the first miss; distances along a prefix
are near-monotone, so the sampled prefix stands for the full one). Assumes LRU.

Memory is bounded: each mini-cache holds at most `max_keys_per_scale` pages (8,192 by
default; 6 scales x 8,192 keys, about 6 MB of Python dicts); a scale that hits the bound
evicts early and is flagged `capped` (its estimate is then a lower bound). Keys are
salted with a per-process random base and never leave the process.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from engine_adapter.embedded.page_hashes import PrefixHasher

POOL_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_RATE = 0.01
FULL_DEPTH_PAGES = 32  # one 512-token block at page 16
MAX_KEYS_PER_SCALE = 8192
_SAMPLE_BITS = 24
_FRESH = np.uint64(1) << np.uint64(63)


@dataclass(frozen=True, kw_only=True)
class WhatIfPoint:
    pool_scale: float
    pool_tokens: int
    hit_rate: float | None  # None until a cacheable page was seen
    capped: bool  # the mini-cache hit its key bound: a lower bound


@dataclass(frozen=True, kw_only=True)
class WhatIfCurve:
    """The shadow's answer at one instant, plus the trust check: the sampled 1x point next to
    the hit rate the engine itself measured over the same requests."""

    points: tuple[WhatIfPoint, ...]
    sample_rate: float
    full_depth_pages: int
    requests: int
    prompt_tokens: int
    shadow_keys: int  # pages held across the mini-caches now
    max_keys: int
    measured_hit_rate: float | None  # the engine's own H over the same requests
    assumption: str = "LRU"

    def at(self, scale: float) -> WhatIfPoint | None:
        return next((p for p in self.points if p.pool_scale == scale), None)

    @property
    def error_1x(self) -> float | None:
        """Sampled 1x estimate minus the measured hit rate (None if either is unknown)."""
        point = self.at(1.0)
        if point is None or point.hit_rate is None or self.measured_hit_rate is None:
            return None
        return point.hit_rate - self.measured_hit_rate


class _MiniCache:
    """An LRU over sampled pages with a capacity in (weighted) pages and a key bound."""

    __slots__ = ("capacity", "max_keys", "entries", "weight", "capped", "hits")

    def __init__(self, capacity: float, max_keys: int) -> None:
        self.capacity = capacity
        self.max_keys = max_keys
        self.entries: OrderedDict[int, float] = OrderedDict()
        self.weight = 0.0
        self.capped = False
        self.hits = 0.0

    def touch(self, key: int, weight: float) -> bool:
        """Access `key`: True on a hit (moved to most recent), else inserted, evicting."""
        entries = self.entries
        if key in entries:
            entries.move_to_end(key)
            return True
        entries[key] = weight
        self.weight += weight
        while self.weight > self.capacity or len(entries) > self.max_keys:
            if len(entries) > self.max_keys:
                self.capped = True
            _, gone = entries.popitem(last=False)
            self.weight -= gone
        return False


class WhatIfShadow:
    """Feed it each request's prompt once, when the engine matches it (`observe`); read the
    curve with `curve()`. Mutates only itself. Not thread-safe: call from the thread that
    runs the scheduler."""

    def __init__(self, *, pool_tokens: int, page_size: int, rate: float = DEFAULT_RATE,
                 full_depth_pages: int = FULL_DEPTH_PAGES, scales=POOL_SCALES,
                 max_keys_per_scale: int = MAX_KEYS_PER_SCALE, seed: int | None = None) -> None:
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"what-if sample rate must be in (0, 1], got {rate}")
        self.page_size = page_size
        self.pool_tokens = pool_tokens
        self.rate = rate
        self.full_depth_pages = full_depth_pages
        salt = secrets.randbits(64) if seed is None else seed
        self.hasher = PrefixHasher(page_size, salt | 1)  # salted: keys never match SGLang's
        self._salt = np.uint64(salt)
        self._threshold = np.uint64(int(rate * (1 << _SAMPLE_BITS)))
        pool_pages = pool_tokens / page_size
        self.scales = tuple(scales)
        self._caches = [_MiniCache(s * pool_pages, max_keys_per_scale) for s in self.scales]
        self.max_keys = max_keys_per_scale * len(self.scales)
        self._fresh = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.matchable_pages = 0
        self.sampled_matchable_weight = 0.0
        self.measured_hit_tokens = 0
        self._measured = True

    def observe_tokens(self, tokens, *, output_tokens: int = 0,
                       cached_tokens: int | None = None) -> None:
        """`observe` for a prompt given as token ids (hashed here with the salted base)."""
        hashes = self.hasher.token_hashes(np.asarray(tokens, dtype=np.int64))
        self.observe(hashes, prompt_tokens=len(tokens), output_tokens=output_tokens,
                     cached_tokens=cached_tokens)

    def observe(self, page_keys: np.ndarray, *, prompt_tokens: int, output_tokens: int = 0,
                cached_tokens: int | None = None) -> None:
        """One request: `page_keys` are its prompt's full-page prefix keys in order; its
        output pages (floor((S+O-1)/P) - floor(S/P), never shared) follow. cached_tokens:
        what the engine itself matched for it (the trust check), if known."""
        page = self.page_size
        matchable = (prompt_tokens - 1) // page  # SGLang caps a match at S-1 tokens
        extra = max((prompt_tokens + output_tokens - 1) // page - prompt_tokens // page, 0)
        keys = np.asarray(page_keys, dtype=np.uint64)
        if extra:
            keys = np.concatenate([keys, _FRESH | np.arange(self._fresh, self._fresh + extra,
                                                            dtype=np.uint64)])
            self._fresh += extra
        depth = np.arange(len(keys))
        keep = (depth < self.full_depth_pages) | (self._hashed(keys) < self._threshold)
        index = np.flatnonzero(keep)
        weights = np.where(depth[index] < self.full_depth_pages, 1.0, 1.0 / self.rate)
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.matchable_pages += matchable
        if cached_tokens is None:
            self._measured = False  # one request without a figure: no trust check
        else:
            self.measured_hit_tokens += cached_tokens
        caches = self._caches
        alive = [True] * len(caches)  # the sampled prefix so far hit at that scale
        for key, where, weight in zip(keys[index].tolist(), index.tolist(), weights.tolist()):
            cacheable = where < matchable
            if cacheable:
                self.sampled_matchable_weight += weight
            for slot, cache in enumerate(caches):
                hit = cache.touch(key, weight)
                if alive[slot]:
                    alive[slot] = hit
                    if hit and cacheable:
                        cache.hits += weight

    def curve(self) -> WhatIfCurve:
        """The estimate now (cumulative over every request observed)."""
        cacheable = (self.matchable_pages * self.page_size / self.prompt_tokens
                     if self.prompt_tokens else 0.0)
        points = []
        for scale, cache in zip(self.scales, self._caches):
            rate = (cache.hits / self.sampled_matchable_weight * cacheable
                    if self.sampled_matchable_weight else None)
            points.append(WhatIfPoint(pool_scale=scale, pool_tokens=int(scale * self.pool_tokens),
                                      hit_rate=rate, capped=cache.capped))
        measured = (self.measured_hit_tokens / self.prompt_tokens
                    if self.prompt_tokens and self._measured else None)
        return WhatIfCurve(points=tuple(points), sample_rate=self.rate,
                           full_depth_pages=self.full_depth_pages, requests=self.requests,
                           prompt_tokens=self.prompt_tokens,
                           shadow_keys=sum(len(c.entries) for c in self._caches),
                           max_keys=self.max_keys, measured_hit_rate=measured)

    def _hashed(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            z = (keys ^ self._salt) + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z ^= z >> np.uint64(31)
        return z & np.uint64((1 << _SAMPLE_BITS) - 1)

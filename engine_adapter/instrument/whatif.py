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
    per scale s:  for each sampled page i in order, while it is in cache_s:
                      if i < m: hits_s += weight(i)          (match: nothing moves)
                  touch the sampled pages deepest first      (insert, evicting)
    H_s = hits_s / sampled_matchable_weight x cacheable share     (ratio estimator)

Prefix semantics: a sampled page counts as a hit only while every sampled page before it
in the request hit (the radix match stops at the first miss; distances along a prefix
are near-monotone, so the sampled prefix stands for the full one). Assumes LRU.

Memory is bounded: each mini-cache holds at most `max_keys_per_scale` pages (8,192 by
default, 49,152 in all) in arrays allocated once (instrument/whatif_lru.py, compiled with
numba: 2.1 MiB for six scales at the default bound); a scale that hits the bound evicts
early and is flagged `capped` (its estimate is then a lower bound). Keys are
salted with a per-process random base and never leave the process.
"""

from __future__ import annotations

import hashlib
import secrets
import numpy as np

from engine_adapter.embedded.page_hashes import BLOCK_TOKENS, PrefixHasher
from engine_adapter.instrument.whatif_lru import MiniCaches
from engine_adapter.whatif_view import WhatIfCurve, WhatIfPoint

POOL_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_RATE = 0.01
FULL_DEPTH_PAGES = 32  # one 512-token block at page 16
MAX_KEYS_PER_SCALE = 8192
_SAMPLE_BITS = 24
_FRESH_KEY = 1 << 63  # output pages: a counter with the top bit set
_PROMPT_MASK = np.uint64((1 << 63) - 1)  # prompt keys: the top bit clear
# splitmix64's finalizer (the sampling hash), as numpy scalars built once
_MIX_ADD, _MIX_1, _MIX_2 = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
                            np.uint64(0x94D049BB133111EB))
_SHIFT_30, _SHIFT_27, _SHIFT_31 = np.uint64(30), np.uint64(27), np.uint64(31)
_SAMPLE_MASK = np.uint64((1 << _SAMPLE_BITS) - 1)
_NAMESPACE_CACHE = 1024  # namespace hashes kept (a dict cleared when full)


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
        self._stride = max(round(1 / rate), 1)  # output pages: every stride-th one
        pool_pages = pool_tokens / page_size
        self.scales = tuple(scales)
        self._caches = MiniCaches([s * pool_pages for s in self.scales], max_keys_per_scale)
        self._hits = [0.0] * len(self.scales)
        self.max_keys = max_keys_per_scale * len(self.scales)
        self._namespaces: dict[str, np.uint64] = {}
        self._fresh = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.matchable_pages = 0
        self.sampled_matchable_weight = 0.0
        self.measured_hit_tokens = 0
        self._measured = True

    def observe_tokens(self, tokens, *, block_ids=None, namespace: str = "",
                       output_tokens: int = 0,
                       cached_tokens: int | None = None) -> None:
        """`observe` for a prompt given as token ids (hashed here with the salted base; from
        its Mooncake block ids when given, without expanding them). Requests of different
        namespaces never share a key (SGLang's tree separates them)."""
        if block_ids is not None and BLOCK_TOKENS % self.page_size == 0:
            hashes = self.hasher.block_hashes(block_ids, len(tokens))
        else:
            hashes = self.hasher.token_hashes(np.asarray(tokens, dtype=np.int64))
        if namespace:
            hashes = hashes ^ self._hashed_text(namespace)
        self.observe(hashes, prompt_tokens=len(tokens), output_tokens=output_tokens,
                            cached_tokens=cached_tokens)

    def observe(self, page_keys: np.ndarray, *, prompt_tokens: int, output_tokens: int = 0,
                cached_tokens: int | None = None) -> None:
        """One request at its match: `page_keys` are its prompt's full-page prefix keys in
        order; `output_tokens` of output pages (floor((S+O-1)/P) - floor(S/P), never shared)
        are inserted with it (0: insert them later with `finish`). cached_tokens: what the
        engine itself matched (the trust check)."""
        page = self.page_size
        matchable = (prompt_tokens - 1) // page  # SGLang caps a match at S-1 tokens
        keys = np.asarray(page_keys, dtype=np.uint64) & _PROMPT_MASK
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.matchable_pages += matchable
        if cached_tokens is None:
            self._measured = False  # one request without a figure: no trust check
        else:
            self.measured_hit_tokens += cached_tokens
        full = min(self.full_depth_pages, len(keys))
        deep = np.flatnonzero(self._in_sample(keys[full:])) + full
        sampled = np.concatenate((keys[:full], keys[deep]))
        weight = 1.0 / self.rate
        n_deep = len(deep)
        deep_counted = int(np.count_nonzero(deep < matchable))  # deep is ascending
        counted = [1.0] * min(full, matchable) + [0.0] * max(full - matchable, 0) + \
            [weight] * deep_counted + [0.0] * (n_deep - deep_counted)  # the weight a hit counts
        self.sampled_matchable_weight += sum(counted)
        # SGLang's step order (kvctl/replay/curve/distance.py): match every page first,
        # counting leading hits (nothing moves); then insert, deepest first. The caches
        # nest (an LRU's content grows with its size), so a larger cache's hit run starts
        # where the smaller one's ended (MiniCaches.hit_runs).
        hits = self._hits
        for index, run in enumerate(self._caches.hit_runs(sampled).tolist()):
            hits[index] += sum(counted[:run])
        weights = np.full(len(sampled), weight)
        weights[n_deep:] = 1.0  # deepest first, as the keys below
        order, order_weights = sampled[::-1], weights
        outputs = self._outputs(prompt_tokens, output_tokens)
        if outputs:
            order = np.concatenate((np.array([k for k, _ in outputs], dtype=np.uint64), order))
            order_weights = np.concatenate((np.array([w for _, w in outputs]), weights))
        self._caches.touch(np.ascontiguousarray(order), order_weights)

    def finish(self, *, prompt_tokens: int, output_tokens: int) -> None:
        """A request observed with output_tokens=0 finished: its output pages are inserted
        (SGLang inserts the committed sequence then; the prompt's pages keep the recency
        of its match, as in the one-pass curve)."""
        outputs = self._outputs(prompt_tokens, output_tokens)
        if outputs:
            self._caches.touch(np.array([k for k, _ in outputs], dtype=np.uint64),
                               np.array([w for _, w in outputs]))

    def _outputs(self, prompt_tokens: int, output_tokens: int) -> list[tuple[int, float]]:
        """The request's new output pages that fall in the sample, deepest first. They are
        never shared (unique ids), so every 1/rate-th one is kept: a spatial sample of
        unique keys, without hashing them."""
        page = self.page_size
        extra = max((prompt_tokens + output_tokens - 1) // page - prompt_tokens // page, 0)
        first, self._fresh = self._fresh, self._fresh + extra
        stride = self._stride
        start = -(-first // stride) * stride
        weight = float(stride)
        return [(_FRESH_KEY | n, weight) for n in range(start, first + extra, stride)][::-1]

    def _in_sample(self, keys: np.ndarray) -> np.ndarray:
        return self._hashed(keys) < self._threshold

    def _hashed_text(self, text: str) -> np.uint64:
        """The salted hash of a namespace label, kept for the next request of it."""
        value = self._namespaces.get(text)
        if value is None:
            if len(self._namespaces) >= _NAMESPACE_CACHE:
                self._namespaces.clear()
            digest = hashlib.blake2b(text.encode(), digest_size=8,
                                     key=self._salt.tobytes()).digest()
            value = self._namespaces[text] = np.uint64(int.from_bytes(digest, "little"))
        return value

    def curve(self) -> WhatIfCurve:
        """The estimate now (cumulative over every request observed)."""
        cacheable = (self.matchable_pages * self.page_size / self.prompt_tokens
                     if self.prompt_tokens else 0.0)
        points = []
        for scale, hits, capped in zip(self.scales, self._hits, self._caches.capped.tolist()):
            rate = (hits / self.sampled_matchable_weight * cacheable
                    if self.sampled_matchable_weight else None)
            points.append(WhatIfPoint(pool_scale=scale, pool_tokens=int(scale * self.pool_tokens),
                                      hit_rate=rate, capped=capped))
        measured = (self.measured_hit_tokens / self.prompt_tokens
                    if self.prompt_tokens and self._measured else None)
        return WhatIfCurve(points=tuple(points), sample_rate=self.rate,
                           full_depth_pages=self.full_depth_pages, requests=self.requests,
                           prompt_tokens=self.prompt_tokens,
                           shadow_keys=int(self._caches.count.sum()),
                           max_keys=self.max_keys, measured_hit_rate=measured)

    def _hashed(self, keys: np.ndarray) -> np.ndarray:
        """splitmix64's finalizer of the salted keys, low _SAMPLE_BITS bits; in place on one
        array (uint64 array arithmetic wraps silently)."""
        z = keys ^ self._salt
        z += _MIX_ADD
        z ^= z >> _SHIFT_30
        z *= _MIX_1
        z ^= z >> _SHIFT_27
        z *= _MIX_2
        z ^= z >> _SHIFT_31
        z &= _SAMPLE_MASK
        return z

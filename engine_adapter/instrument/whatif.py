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

The rate a feed uses (`fitted_rate`): the configured rate is a floor, raised as far as the
largest scale's deep sample fits half the key bound (weight held <= capacity, so deep keys
<= rate x capacity; the other half is left to the full-depth pages and the pins). A small
pool is then shadowed whole (rate 1: lifecycle-check's 3,072-token pool), a 65,536-token
pool at 50%, a 1M-token pool at 3.1%; only pools past 3.3M tokens (at page 16) fall to the
1% floor (whose sample still fills half the bound at the largest scale). Measured
(benchmarks/bench_whatif.py, seed 7, docs/curve.md): at a fixed 1% a small workload leaves
a handful of deep pages in the sample and the 1x estimate misses by whole points
(lifecycle-check -6.2, multi-tenant-chat -7.5: its 1,200-token shared prefix has 43 of its
75 pages past the full depth, about 0.4 of them sampled per namespace) where the same
events at rate 1 miss by -0.6 and -0.7. The price is work per event, which grows with the
sampled pages (docs/plugin.md), and memory: the bound is 32,766 keys a scale (up from
8,192) so that a 65,536-token pool still samples half its pages.

Memory is bounded: each mini-cache holds at most `max_keys_per_scale` pages (32,766 by
default, 196,596 in all) in arrays allocated once (instrument/whatif_lru.py, compiled with
numba: 6.75 MiB for six scales at the default bound); a scale that hits the bound evicts
early and is flagged `capped` (its estimate is then a lower bound). Requests waiting to be
folded in (instrument/whatif_kernel.py) are at most FOLD_EVERY (256), holding at most
FOLD_TOKENS (2^20) token ids past which the next request folds them: 8 MiB plus one prompt.
Keys are salted with a per-process random base and never leave the process.
"""

from __future__ import annotations

import hashlib
import secrets

import numpy as np

from engine_adapter.embedded.page_hashes import BLOCK_TOKENS, PrefixHasher
from engine_adapter.instrument.whatif_events import EventLog
from engine_adapter.instrument.whatif_kernel import (SAMPLE_BITS, fold, sample_pages,
                                                     sample_tokens, token_keys)
from engine_adapter.instrument.whatif_lru import MiniCaches
from engine_adapter.whatif_view import WhatIfCurve, WhatIfPoint

POOL_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_RATE = 0.01
FULL_DEPTH_PAGES = 32  # one 512-token block at page 16
MAX_KEYS_PER_SCALE = 32_766  # the most a 2-byte table cell addresses (whatif_lru.py)
_FRESH_KEY = 1 << 63  # output pages: a counter with the top bit set
_PROMPT_MASK = np.uint64((1 << 63) - 1)  # prompt keys: the top bit clear
_NAMESPACE_CACHE = 1024  # namespace hashes kept (a dict cleared when full)
FOLD_EVERY = 256  # buffered requests and finishes folded at once (and at every curve read)
FOLD_TOKENS = 1 << 20  # ... or once this many prompt token ids wait (8 MiB of int64)
# What the estimate cannot model (WhatIfCurve.not_modeled; docs/curve.md measures each)
NOT_MODELED = (
    "running set at other pool sizes: the 1x engine's admissions, batches and private "
    "tokens are replayed at every scale (a larger pool admits more at once, and requests "
    "admitted together cannot hit each other: tree-of-thought measures less at 2x)",
    "retraction: a retracted request keeps its pins until it finishes",
    "host tier at other scales: the 1x engine's reload span counts as a hit at every scale",
)
_ZERO = np.uint64(0)
_NO_KEYS, _NO_WEIGHTS = np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float64)


def fitted_rate(min_rate: float, *, pool_tokens: int, page_size: int, scales=POOL_SCALES,
                max_keys_per_scale: int = MAX_KEYS_PER_SCALE) -> float:
    """The sampling rate for a shadow of this pool: `min_rate` (the configured rate), raised
    until the largest scale's sampled deep pages would fill half the key bound, at most 1
    (module docstring)."""
    largest_pages = max(scales) * pool_tokens / page_size
    if largest_pages <= 0:
        return min_rate
    return min(1.0, max(min_rate, max_keys_per_scale / 2 / largest_pages))


class WhatIfShadow:
    """Feed it each request's prompt once, when the engine matches it (`observe`); read the
    curve with `curve()`. Requests and finishes are buffered and folded into the mini-caches
    in arrival order in batches (`flush`: at FOLD_EVERY operations or FOLD_TOKENS buffered
    token ids, and before every curve read), which leaves every figure as folding each at
    once would. Mutates only itself. Not thread-safe: call from the scheduler's thread."""

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
        self._threshold = np.uint64(int(rate * (1 << SAMPLE_BITS)))
        self._stride = max(round(1 / rate), 1)  # output pages: every stride-th one
        pool_pages = pool_tokens / page_size
        self.scales = tuple(scales)
        self._caches = MiniCaches([s * pool_pages for s in self.scales], max_keys_per_scale)
        self._hits = np.zeros(len(self.scales), dtype=np.float64)  # hit weight per scale
        self._weight = 1.0 / rate  # what a sampled deep page stands for
        self._kernel_args = self._caches.kernel_args()
        self.events = EventLog(self)  # the event-driven feed's (admit .. unlock)
        self._pending: list[tuple] = []  # requests and finishes not folded in yet
        self._pending_tokens = 0  # token ids they hold (FOLD_TOKENS bounds the memory)
        self._powers = self.hasher.powers(page_size)  # B^0 .. B^(p-1)
        self._warm_up()
        self.max_keys = max_keys_per_scale * len(self.scales)
        self._namespaces: dict[str, np.uint64] = {}
        self._fresh = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.matchable_pages = 0
        self.sampled_matchable_weight = 0.0
        self.measured_hit_tokens = 0
        self.measured_prompt_tokens = 0
        self._measured = True

    def observe_tokens(self, tokens, *, block_ids=None, namespace: str = "",
                       output_tokens: int = 0,
                       cached_tokens: int | None = None) -> None:
        """`observe` for a prompt given as token ids (hashed with the salted base; from its
        Mooncake block ids when given, without expanding them). Requests of different
        namespaces never share a key (SGLang's tree separates them). Token ids are hashed
        and sampled at the next `flush` (compiled, warm): a token array must not change
        until then (SGLang's and the embedded engine's prompts never do; a list is copied)."""
        ns = self._hashed_text(namespace) if namespace else _ZERO
        prompt = len(tokens)
        matchable = (prompt - 1) // self.page_size  # SGLang caps a match at S-1 tokens
        if block_ids is not None and BLOCK_TOKENS % self.page_size == 0:
            keys = (self.hasher.block_hashes(block_ids, prompt) ^ ns) & _PROMPT_MASK
            work = sample_pages(keys, matchable, self.full_depth_pages, self._salt,
                                self._threshold, self._weight)
        else:  # the page-by-page chain of PrefixHasher.token_hashes, at the flush
            work = (np.ascontiguousarray(tokens, dtype=np.int64).view(np.uint64), ns)
            self._pending_tokens += prompt
        self._observed(work, prompt, matchable, output_tokens, cached_tokens)

    def observe(self, page_keys: np.ndarray, *, prompt_tokens: int, output_tokens: int = 0,
                cached_tokens: int | None = None) -> None:
        """One request at its match: `page_keys` are its prompt's full-page prefix keys in
        order; `output_tokens` of output pages (floor((S+O-1)/P) - floor(S/P), never shared)
        are inserted with it (0: insert them later with `finish`). cached_tokens: what the
        engine itself matched (the trust check)."""
        matchable = (prompt_tokens - 1) // self.page_size  # SGLang caps a match at S-1 tokens
        keys = np.ascontiguousarray(page_keys, dtype=np.uint64) & _PROMPT_MASK
        work = sample_pages(keys, matchable, self.full_depth_pages, self._salt,
                            self._threshold, self._weight)
        self._observed(work, prompt_tokens, matchable, output_tokens, cached_tokens)

    def _observed(self, work: tuple, prompt_tokens: int, matchable: int, output_tokens: int,
                  cached_tokens: int | None) -> None:
        """Count the request and buffer it for the next `flush`: `work` is its sample
        (sample_pages) or (token ids, namespace hash) to sample then.

        SGLang's step order (kvctl/replay/curve/distance.py), applied by the fold: match
        every sampled page first, counting leading hits (nothing moves); then insert,
        deepest first. The caches nest (an LRU's content grows with its size), so a larger
        cache's hit run starts where the smaller one's ended."""
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.matchable_pages += matchable
        if cached_tokens is None:
            self._measured = False  # one request without a figure: no trust check
        else:
            self.measured_hit_tokens += cached_tokens
            self.measured_prompt_tokens += prompt_tokens
        self._pending.append((work, matchable, *self._outputs(prompt_tokens, output_tokens)))
        if len(self._pending) >= FOLD_EVERY or self._pending_tokens >= FOLD_TOKENS:
            self.flush()

    def finish(self, *, prompt_tokens: int, output_tokens: int) -> None:
        """A request observed with output_tokens=0 finished: its output pages are inserted
        (SGLang inserts the committed sequence then; the prompt's pages keep the recency
        of its match, as in the one-pass curve). Buffered, in order with the requests."""
        out_keys, out_weights = self._outputs(prompt_tokens, output_tokens)
        if len(out_keys):
            self._pending.append((None, 0, out_keys, out_weights))
            if len(self._pending) >= FOLD_EVERY:
                self.flush()

    def flush(self) -> None:
        """Fold every buffered request and finish into the mini-caches, in arrival order:
        sample the requests given as token ids, add each request's sampled weight, then one
        compiled call (instrument/whatif_kernel.py `fold`). `curve` calls it first."""
        if self.events.pending:
            self._pending_tokens = 0
            self.events.apply()
        pending = self._pending
        if not pending:
            return
        self._pending, self._pending_tokens = [], 0
        sampled, counted, fulls = [], [], []
        page, full_depth = self.page_size, self.full_depth_pages
        for work, matchable, _, _ in pending:
            if work is None:  # a finish: output pages only
                keys, weights, total, full = _NO_KEYS, _NO_WEIGHTS, 0.0, 0
            elif len(work) == 2:  # token ids: the page keys and their sample, compiled
                ids, ns = work
                page_powers = self.hasher.page_powers(0, max(len(ids) // page, 1))
                keys, weights, total, full = sample_tokens(
                    ids, page, self._powers, page_powers, ns, matchable, full_depth,
                    self._salt, self._threshold, self._weight)
            else:
                keys, weights, total, full = work
            if work is not None:
                self.sampled_matchable_weight += total
            sampled.append(keys)
            counted.append(weights)
            fulls.append(full)
        out_keys = [item[2] for item in pending]
        fold(np.concatenate(sampled), np.concatenate(counted), _starts(sampled),
             np.array(fulls, dtype=np.int64), np.concatenate(out_keys),
             np.concatenate([item[3] for item in pending]), _starts(out_keys), self._weight,
             self._hits, *self._kernel_args)

    # ---- driven by the cache's events (instrument/whatif_events.py) ----------------------
    # A feed calls these at SGLang's own events, in its order: within one step every
    # admission before any insert or finish. reserved_tokens: what running requests hold
    # outside the tree at that instant (ledger.py's private term); each scale's LRU then
    # holds at most scale x pool - reserved. Do not mix with `observe` on one shadow.

    def admit(self, rid, tokens, *, block_ids=None, namespace: str = "",
              cached_tokens: int | None = None, reserved_tokens: int = 0,
              host_tokens: int = 0, lookup: bool = True) -> None:
        """SGLang matched request `rid`'s prompt (token ids; from Mooncake block ids when
        given): its hit at every scale is decided now, and its cached prefix is pinned.
        host_tokens: a prefix a host tier returns whatever the device holds (the engine's
        reload span end; counted as hits at every scale). cached_tokens: the engine's own
        hit (the trust check; `record_measured` gives it later). lookup False: the engine
        did not consult the tree (no hit at any scale; the prompt is still inserted)."""
        ns = self._hashed_text(namespace) if namespace else _ZERO
        prompt = len(tokens)
        matchable = (prompt - 1) // self.page_size
        if block_ids is not None and BLOCK_TOKENS % self.page_size == 0:
            work = (self.hasher.block_hashes(block_ids, prompt) ^ ns) & _PROMPT_MASK
        else:
            work = (np.ascontiguousarray(tokens, dtype=np.int64).view(np.uint64), ns)
            self._pending_tokens += prompt
        self.requests += 1
        self.prompt_tokens += prompt
        self.matchable_pages += matchable
        if cached_tokens is not None:
            self.record_measured(cached_tokens, prompt)
        host_pages = min(host_tokens, prompt - 1) // self.page_size if host_tokens else 0
        self._event(("admit", rid, reserved_tokens, work, matchable, host_pages, lookup))

    def insert(self, rid, prefilled_tokens: int, *, reserved_tokens: int = 0) -> None:
        """SGLang inserted (checkpoint_kv_cache) `rid`'s first `prefilled_tokens` tokens."""
        self._event(("insert", rid, reserved_tokens, prefilled_tokens))

    def release(self, rid, *, prompt_tokens: int, output_tokens: int, output_ids=None,
                reserved_tokens: int = 0, retain: bool = False) -> None:
        """`rid` finished: its sequence is inserted and, unless `retain` (a lease keeps it
        locked until `unlock`), evictable from now on. output_ids (not changed until the
        next flush): its output pages are keyed by the real sequence, so a later prompt
        that carries them hits them; without, they are fresh keys."""
        self._event(("finish", rid, reserved_tokens,
                     (prompt_tokens, output_tokens, output_ids), retain))

    def unlock(self, rid, *, reserved_tokens: int = 0) -> None:
        """The lease on `rid`'s retained path was released or revoked."""
        self._event(("unlock", rid, reserved_tokens))

    def flush_cache(self) -> None:
        """The engine evicted every unlocked prefix (SGLang's flush_cache)."""
        self._event(("flush", None, 0))

    def record_measured(self, cached_tokens: int, prompt_tokens: int) -> None:
        """The engine's own hit for one admitted request (the 1x trust check)."""
        self.measured_hit_tokens += cached_tokens
        self.measured_prompt_tokens += prompt_tokens

    def _event(self, event: tuple) -> None:
        self.events.pending.append(event)
        if len(self.events.pending) >= FOLD_EVERY or self._pending_tokens >= FOLD_TOKENS:
            self.flush()

    def _token_keys(self, ids: np.ndarray, ns, *, first_page: int = 0,
                    chain=_ZERO) -> tuple[np.ndarray, np.uint64]:
        """The page keys of uint64 token ids (PrefixHasher.token_hashes, salted) ^ ns, and
        the chain value after the last full page. first_page, chain: `ids` start at that
        page of a sequence whose earlier pages left `chain` (only the new pages hashed)."""
        pages = len(ids) // self.page_size
        out = np.empty(pages, dtype=np.uint64)
        chain = token_keys(ids, self.page_size, self._powers,
                           self.hasher.page_powers(first_page, max(pages, 1)), ns, out,
                           np.uint64(chain))
        return out, chain

    def _warm_up(self) -> None:
        """Compile (or load numba's on-disk cache of) the kernels now, at the plugin's
        attach, with the argument types of every later call and no effect on the state:
        not inside the scheduler's first prefill (MiniCaches does the same)."""
        empty = np.empty(0, dtype=np.uint64)
        sample_tokens(empty, self.page_size, self._powers, self.hasher.page_powers(0, 1), _ZERO,
                      0, self.full_depth_pages, self._salt, self._threshold, self._weight)
        sample_pages(empty, 0, self.full_depth_pages, self._salt, self._threshold,
                     self._weight)
        self._pending.append((None, 0, _NO_KEYS, _NO_WEIGHTS))
        self.flush()  # nothing sampled: no lookup hits, nothing inserted
        self.events.warm_up()

    def _outputs(self, prompt_tokens: int, output_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """The request's new output pages that fall in the sample, deepest first, and their
        weights. They are never shared (unique ids), so every 1/rate-th one is kept: a
        spatial sample of unique keys, without hashing them."""
        page = self.page_size
        extra = max((prompt_tokens + output_tokens - 1) // page - prompt_tokens // page, 0)
        first, self._fresh = self._fresh, self._fresh + extra
        stride = self._stride
        start = -(-first // stride) * stride
        if start >= first + extra:
            return _NO_KEYS, _NO_WEIGHTS
        numbers = np.arange(start, first + extra, stride, dtype=np.uint64)[::-1]
        keys = numbers | np.uint64(_FRESH_KEY)
        return keys, np.full(len(keys), float(stride))

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
        self.flush()
        cacheable = (self.matchable_pages * self.page_size / self.prompt_tokens
                     if self.prompt_tokens else 0.0)
        points = []
        for scale, hits, capped in zip(self.scales, self._hits.tolist(),
                                       self._caches.capped.tolist()):
            rate = (hits / self.sampled_matchable_weight * cacheable
                    if self.sampled_matchable_weight else None)
            points.append(WhatIfPoint(pool_scale=scale, pool_tokens=int(scale * self.pool_tokens),
                                      hit_rate=rate, capped=capped))
        measured = (self.measured_hit_tokens / self.measured_prompt_tokens
                    if self.measured_prompt_tokens and self._measured else None)
        return WhatIfCurve(points=tuple(points), sample_rate=self.rate,
                           full_depth_pages=self.full_depth_pages, requests=self.requests,
                           prompt_tokens=self.prompt_tokens,
                           shadow_keys=int(self._caches.count.sum()),
                           max_keys=self.max_keys, measured_hit_rate=measured,
                           not_modeled=NOT_MODELED)


def _starts(parts) -> np.ndarray:
    """Offsets of each part in their concatenation, and the total at the end."""
    starts = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(part) for part in parts], out=starts[1:])
    return starts

"""The what-if shadow's compiled sample and batched fold (engine_adapter/instrument/
whatif_kernel.py) against the numpy form they replaced, kept here as the reference, applied
to each request at once: the same hits, the same sampled weight and the same mini-cache
contents in the same LRU order, bit for bit, whether folded per request or in batches.
That reference shares the shadow's helpers (PrefixHasher, MiniCaches), so an oracle written
from the definitions alone (_OracleShadow: plain-Python keys, sampling and LRUs) checks the
served curve too."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from engine_adapter.instrument.whatif import WhatIfShadow
from kvctl.replay.mooncake import iter_records, prompt_tokens

pytestmark = pytest.mark.unit

HEAD = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"
_MASK = np.uint64((1 << 63) - 1)


def _reference_observe(shadow: WhatIfShadow, tokens, namespace: str, output_tokens: int) -> None:
    """The numpy form of WhatIfShadow.observe_tokens before the compiled kernel (issue 28),
    driving the same MiniCaches through their own hit_runs / touch."""
    hashes = shadow.hasher.token_hashes(np.asarray(tokens, dtype=np.int64))
    if namespace:
        hashes = hashes ^ shadow._hashed_text(namespace)
    prompt = len(tokens)
    matchable = (prompt - 1) // shadow.page_size
    keys = hashes & _MASK
    shadow.requests += 1
    shadow.prompt_tokens += prompt
    shadow.matchable_pages += matchable
    shadow._measured = False
    full = min(shadow.full_depth_pages, len(keys))
    z = keys[full:] ^ shadow._salt  # splitmix64's finalizer, low 24 bits
    z += np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    deep = np.flatnonzero((z & np.uint64((1 << 24) - 1)) < shadow._threshold) + full
    sampled = np.concatenate((keys[:full], keys[deep]))
    weight = 1.0 / shadow.rate
    n_deep = len(deep)
    deep_counted = int(np.count_nonzero(deep < matchable))
    counted = [1.0] * min(full, matchable) + [0.0] * max(full - matchable, 0) + \
        [weight] * deep_counted + [0.0] * (n_deep - deep_counted)
    shadow.sampled_matchable_weight += sum(counted)
    for index, run in enumerate(shadow._caches.hit_runs(sampled).tolist()):
        shadow._hits[index] += sum(counted[:run])
    weights = np.full(len(sampled), weight)
    weights[n_deep:] = 1.0
    out_keys, out_weights = shadow._outputs(prompt, output_tokens)
    shadow._caches.touch(np.concatenate((out_keys, sampled[::-1])),
                         np.concatenate((out_weights, weights)))


def _reference_finish(shadow: WhatIfShadow, prompt: int, output: int) -> None:
    out_keys, out_weights = shadow._outputs(prompt, output)
    if len(out_keys):
        shadow._caches.touch(out_keys, out_weights)


def _lru(shadow: WhatIfShadow) -> list[list[tuple[int, float]]]:
    """Every mini-cache's (key, weight) from least to most recent."""
    caches, scales = shadow._caches, []
    for c in range(len(caches.held)):
        order, slot = [], caches.head[c]
        while slot != -1:
            order.append((int(caches.keys[c, slot]), float(caches.weights[c, slot])))
            slot = caches.newer[c, slot]
        scales.append(order)
    return scales


@pytest.mark.parametrize(("rate", "max_keys"), [(0.01, 8192), (0.2, 300), (1.0, 2048)])
def test_compiled_request_matches_the_numpy_form(rate, max_keys):
    """300 head_500 prompts (two namespaces, outputs inserted with the prompt, every third
    request's outputs at its finish instead): folded after each request, the hits and the
    sampled weight equal the reference's after each; folded in batches (every 256 buffered
    operations, and at the curve read), the end state is the same: every mini-cache holds
    the same keys with the same weights in the same LRU order, the same capped flags."""
    shadows = [WhatIfShadow(pool_tokens=60_000, page_size=16, rate=rate, seed=5,
                            max_keys_per_scale=max_keys) for _ in range(3)]
    each, batched, reference = shadows
    for index, record in enumerate(iter_records(HEAD, limit=300)):
        tokens = prompt_tokens(record)
        namespace = "" if index % 3 else f"tenant-{index % 2}"
        with_prompt = record.output_length if index % 3 != 1 else 0
        for shadow in (each, batched):
            shadow.observe_tokens(tokens, namespace=namespace, output_tokens=with_prompt)
        _reference_observe(reference, tokens, namespace, with_prompt)
        if not with_prompt:
            for shadow in (each, batched):
                shadow.finish(prompt_tokens=len(tokens), output_tokens=record.output_length)
            _reference_finish(reference, len(tokens), record.output_length)
        each.flush()
        assert each._hits.tolist() == reference._hits.tolist()
        assert each.sampled_matchable_weight == reference.sampled_matchable_weight
    batched.curve()  # folds what is still buffered
    for shadow in (each, batched):
        assert shadow._hits.tolist() == reference._hits.tolist()
        assert _lru(shadow) == _lru(reference)
        assert shadow._caches.held.tolist() == reference._caches.held.tolist()
        assert shadow._caches.capped.tolist() == reference._caches.capped.tolist()
    assert sum(reference._hits) > 0 and sum(len(s) for s in _lru(reference)) > 0


def test_buffered_token_ids_are_bounded(monkeypatch):
    """With FOLD_TOKENS at 1,000: two 600-token prompts (1,200 buffered ids) fold at the
    second, a third waits alone; the curve then equals a shadow that folded each at once."""
    import engine_adapter.instrument.whatif as whatif

    monkeypatch.setattr(whatif, "FOLD_TOKENS", 1000)
    shadows = [WhatIfShadow(pool_tokens=4096, page_size=16, rate=1.0, seed=9) for _ in range(2)]
    bounded, each = shadows
    prompts = [np.arange(600) + 1000 * (i % 2) for i in range(3)]
    pending = []
    for tokens in prompts:
        bounded.observe_tokens(tokens, cached_tokens=0)
        pending.append((len(bounded._pending), bounded._pending_tokens))
        each.observe_tokens(tokens, cached_tokens=0)
        each.flush()
    assert pending == [(1, 600), (0, 0), (1, 600)]
    assert bounded.curve() == each.curve()


# ----- an oracle written from the definitions, sharing no code with the shadow -----------
# whatif.py's module docstring and whatif_kernel.py's arithmetic table, in plain Python
# ints and one OrderedDict per scale: no PrefixHasher, no sampling kernel, no MiniCaches.

_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """splitmix64's finalizer (Steele, Lea, Flood 2014)."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class _OracleShadow:
    """What the shadow estimates, from its definition: page k's key is the salted hash of
    the prompt's first (k + 1) P tokens, sum t_j B^j mod 2^64 with B = salt | 1, top bit
    clear; the first `full_depth` pages are sampled with weight 1, a deeper one when
    splitmix64(key ^ salt)'s low 24 bits are under rate x 2^24, weight 1 / rate. Per scale,
    an LRU holding sampled pages up to a weight of scale x pool pages: a request first
    counts, page by page in order, the matchable (k < floor((S-1)/P)) sampled pages it
    finds until the first it does not (nothing moves), then touches its output pages
    (fresh keys, every 1/rate-th, deepest first) and its sampled pages deepest first; a
    new key goes in at the recent end and the least recent leave while the weight held
    exceeds the capacity."""

    def __init__(self, *, pool_tokens: int, page_size: int, rate: float, full_depth: int,
                 salt: int, scales) -> None:
        self.page, self.rate, self.full_depth, self.salt = page_size, rate, full_depth, salt
        self.base = salt | 1
        self.threshold = int(rate * (1 << 24))
        self.stride = max(round(1 / rate), 1)
        self.capacity = [s * pool_tokens / page_size for s in scales]
        self.lru = [OrderedDict() for _ in scales]  # key -> weight, least recent first
        self.held = [0.0] * len(scales)  # the weight each LRU holds
        self.hits = [0.0] * len(scales)
        self.fresh = 0
        self.prompt_tokens = self.matchable_pages = 0
        self.sampled_weight = 0.0

    def _pages(self, tokens) -> list[tuple[int, float, int]]:
        """(key, weight, page index) of the sampled prompt pages, shallowest first."""
        sampled, h, power = [], 0, 1
        for k in range(len(tokens) // self.page):
            for t in tokens[k * self.page:(k + 1) * self.page]:
                h = (h + int(t) * power) & _M64
                power = (power * self.base) & _M64
            key = h & ((1 << 63) - 1)
            if k < self.full_depth:
                sampled.append((key, 1.0, k))
            elif _splitmix64(key ^ self.salt) & ((1 << 24) - 1) < self.threshold:
                sampled.append((key, 1.0 / self.rate, k))
        return sampled

    def observe(self, tokens, output_tokens: int) -> None:
        prompt, page = len(tokens), self.page
        matchable = (prompt - 1) // page
        self.prompt_tokens += prompt
        self.matchable_pages += matchable
        sampled = self._pages(tokens)
        counted = [weight if k < matchable else 0.0 for _, weight, k in sampled]
        self.sampled_weight += sum(counted)
        extra = max((prompt + output_tokens - 1) // page - prompt // page, 0)
        numbers = [n for n in range(self.fresh, self.fresh + extra) if n % self.stride == 0]
        self.fresh += extra
        inserts = [(n | (1 << 63), float(self.stride)) for n in reversed(numbers)]
        inserts += [(key, weight) for key, weight, _ in reversed(sampled)]
        for c, lru in enumerate(self.lru):
            for (key, _, _), weight in zip(sampled, counted):
                if key not in lru:
                    break
                self.hits[c] += weight
            for key, weight in inserts:
                if key in lru:
                    lru.move_to_end(key)
                    continue
                lru[key] = weight
                self.held[c] += weight
                while self.held[c] > self.capacity[c]:
                    self.held[c] -= lru.popitem(last=False)[1]

    def hit_rates(self) -> list[float]:
        cacheable = self.matchable_pages * self.page / self.prompt_tokens
        return [h / self.sampled_weight * cacheable for h in self.hits]


def _reuse_workload() -> list[tuple[np.ndarray, int]]:
    """300 (prompt, output tokens): each prompt a cut of one of 12 shared prefixes (64 to
    1,023 tokens, picked Zipf-like: a few hot, most cold) and a private suffix (1 to 199
    tokens), outputs of 0 to 63 tokens (seeded)."""
    rng = np.random.default_rng(7)
    prefixes = [rng.integers(1, 30_000, size=int(n)) for n in rng.integers(64, 1024, size=12)]
    requests = []
    for _ in range(300):
        family = prefixes[min(int(rng.zipf(1.5)) - 1, len(prefixes) - 1)]
        head = family[: int(rng.integers(len(family) // 2, len(family) + 1))]
        suffix = rng.integers(1, 30_000, size=int(rng.integers(1, 200)))
        requests.append((np.concatenate((head, suffix)), int(rng.integers(0, 64))))
    return requests


@pytest.mark.parametrize(("rate", "full_depth"), [(1.0, 32), (0.25, 4)])
def test_the_shadow_agrees_with_an_oracle_written_from_its_definition(rate, full_depth):
    """A reuse workload (_reuse_workload, page 16) on a 2,000-token pool: the curve the
    shadow serves equals the oracle's hit rate at every scale, and the scales differ (0.25x
    holds 31 pages, 8x 1,000). At rate 0.25, past the first 4 pages, about a quarter of the
    pages are sampled, each standing for 4."""
    scales = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    shadow = WhatIfShadow(pool_tokens=2000, page_size=16, rate=rate, seed=11,
                          full_depth_pages=full_depth, scales=scales)
    oracle = _OracleShadow(pool_tokens=2000, page_size=16, rate=rate, full_depth=full_depth,
                           salt=11, scales=scales)
    for tokens, output in _reuse_workload():
        shadow.observe_tokens(tokens, output_tokens=output)
        oracle.observe(tokens, output)
    expected = oracle.hit_rates()
    assert len(set(expected)) == len(scales), expected  # the workload tells them apart
    curve = shadow.curve()
    assert not any(p.capped for p in curve.points)
    assert [p.hit_rate for p in curve.points] == pytest.approx(expected, rel=1e-12)


def test_page_keys_carried_on_from_a_prefix_equal_the_whole_sequence_hashed():
    """A finished request's output pages are keyed from the prompt's chain, not by hashing
    the prompt again (whatif_events.EventLog._outputs): for splits on and off a page edge,
    the keys of the pages past the split, carried on, equal those of the whole sequence,
    and the whole equals PrefixHasher.token_hashes (the numpy form) salted, top bit clear."""
    shadow = WhatIfShadow(pool_tokens=4096, page_size=16, rate=1.0, seed=7)
    ns = shadow._hashed_text("tenant/0")
    tokens = np.random.default_rng(3).integers(0, 50_000, 16 * 9 + 5).astype(np.int64)
    ids = tokens.view(np.uint64)
    whole, _ = shadow._token_keys(ids, ns)
    expected = (shadow.hasher.token_hashes(tokens).astype(np.uint64) ^ ns) & _MASK
    assert np.array_equal(whole, expected[:len(whole)]) and len(whole) == 9
    for split_pages in (0, 1, 4, 8):
        _, chain = shadow._token_keys(ids[:split_pages * 16], ns)
        rest, _ = shadow._token_keys(ids[split_pages * 16:], ns, first_page=split_pages,
                                     chain=chain)
        assert np.array_equal(rest, whole[split_pages:]), split_pages

"""The what-if shadow's compiled sample and batched fold (engine_adapter/instrument/
whatif_kernel.py) against the numpy form they replaced, kept here as the reference, applied
to each request at once: the same hits, the same sampled weight and the same mini-cache
contents in the same LRU order, bit for bit, whether folded per request or in batches."""

from __future__ import annotations

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

"""Counting probes on SGLang's eviction entry points.

SGLang evicts inside its own allocation helpers (`evict_to_free_tokens` ->
`tree_cache.evict_for_alloc`, and `tree_cache.evict` for explicit calls). kvctl counts what
those calls return without changing them: the probe wraps the two bound methods of one
cache instance, forwards every argument, and tallies `EvictResult.num_tokens_evicted`.
A call that frees less than it was asked for while the tree still holds protected tokens is
a locked-eviction reject (seed 000 0x0CF "locked-cache pressure").
"""

from __future__ import annotations

import functools
from typing import Any, Callable


def install_eviction_probe(tree_cache: Any, on_evict: Callable[[int, int, int], None], *,
                           on_error: Callable[[Exception], None] | None = None) -> None:
    """Wrap `tree_cache.evict` and `tree_cache.evict_for_alloc` on this instance.

    on_evict(requested_tokens, evicted_tokens, protected_tokens_after) is called after
    every eviction call. on_error: when given, any exception raised while reading the call's
    numbers or in `on_evict` goes to it instead of the caller (a plugin inside a real server
    must never break SGLang's eviction); SGLang's own result is returned either way.
    """
    for name in ("evict", "evict_for_alloc"):
        original = getattr(tree_cache, name)

        @functools.wraps(original)
        def probed(params, *args, _original=original, **kwargs):
            result = _original(params, *args, **kwargs)
            if on_error is None:
                on_evict(params.num_tokens, result.num_tokens_evicted, tree_cache.protected_size())
                return result
            try:
                on_evict(params.num_tokens, result.num_tokens_evicted, tree_cache.protected_size())
            except Exception as exc:
                on_error(exc)
            return result

        setattr(tree_cache, name, probed)

"""Time spent inside SGLang's cache calls during a replay, by perf_counter wrappers.

`replay_split.py --timers` uses this instead of cProfile (which inflates Python-heavy code
more than native calls). `install()` wraps the SGLang entry points that kvctl's direct
cache path calls (the list below: the request helpers of mem_cache/common.py and
allocation.py, the tree's and allocator's methods, `Req`'s); only the outermost wrapped
call on the stack is timed, so SGLang calling SGLang is not counted twice. Each wrapper
adds about a microsecond, charged to SGLang's side (an upper bound on it).
"""

from __future__ import annotations

import functools
import time

# (module, attribute path) of every SGLang callable kvctl's direct path reaches
ENTRY_POINTS = (
    ("sglang.srt.mem_cache.allocation", "alloc_req_slots"),
    ("sglang.srt.mem_cache.allocation", "alloc_paged_token_slots_extend"),
    ("sglang.srt.mem_cache.allocation", "alloc_paged_token_slots_decode"),
    ("sglang.srt.mem_cache.common", "checkpoint_kv_cache"),
    ("sglang.srt.mem_cache.common", "release_kv_cache"),
    ("sglang.srt.managers.schedule_batch", "release_req"),
    ("sglang.srt.managers.schedule_batch", "Req.__init__"),
    ("sglang.srt.managers.schedule_batch", "Req.update_finish_state"),
    ("sglang.srt.managers.schedule_batch", "Req.refresh_fill_ids"),
    ("sglang.srt.managers.schedule_batch", "Req.reset_for_retract"),
    ("sglang.srt.managers.schedule_batch", "Req.init_next_round_input"),
    ("sglang.srt.sampling.sampling_params", "SamplingParams.__init__"),
    ("sglang.srt.mem_cache.radix_cache", "RadixKey.__init__"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.match_prefix"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.lock"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.unlock"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.evict"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.insert"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.prefix_device_indices"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.maybe_hand_to_session"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.root_node_handle"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.evictable_size"),
    ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache.protected_size"),
    ("sglang.srt.mem_cache.allocator.paged", "PagedTokenToKVPoolAllocator.alloc_extend"),
    ("sglang.srt.mem_cache.allocator.paged", "PagedTokenToKVPoolAllocator.available_size"),
    ("sglang.srt.mem_cache.allocator.base", "BaseTokenToKVPoolAllocator.check_decode_capacity"),
)


class Timers:
    """Seconds inside wrapped SGLang calls (outermost only) and the call count."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0
        self._installed: list[tuple[object, str, object]] = []

    def install(self) -> None:
        import importlib

        for module_name, path in ENTRY_POINTS:
            owner = importlib.import_module(module_name)
            *parents, name = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            had_own = isinstance(owner, type) and name in owner.__dict__
            saved = owner.__dict__[name] if had_own else None
            setattr(owner, name, self._wrap(getattr(owner, name)))  # plain functions only
            self._installed.append((owner, name, saved if isinstance(owner, type) else
                                    getattr(owner, name).__wrapped__))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._installed):
            if original is None:  # inherited: drop the shadowing wrapper
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._installed.clear()

    def _wrap(self, fn):
        timers = self

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if timers._depth:
                return fn(*args, **kwargs)
            timers._depth = 1
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timers.seconds += time.perf_counter() - started
                timers.calls += 1
                timers._depth = 0

        return timed

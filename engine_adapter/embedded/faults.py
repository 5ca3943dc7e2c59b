"""Test-only fault injection: prove that every integrity check can fail.

    leak        take pages from SGLang's allocator and give them to nobody: the pool
                ledger gains a residual (seed 000 0x0CF reconciliation).
    lock-leak   take a lock on a cached node that no request or lease holds: recorded
                lock_ref exceeds the derived count (seed 000 0x04B).
    alloc-fail  make the next K/V allocation fail: the admission must roll back and leave
                the state digest unchanged.

Never used outside `kvctl check --inject-fault` and tests.
"""

from __future__ import annotations

import functools

from engine_adapter.embedded.state import EngineState
from engine_adapter.base.errors import InputError

FAULTS = ("leak", "lock-leak", "alloc-fail")


class FaultInjector:
    """Breaks the engine's state on purpose, once per `inject` (see module docstring);
    `injected` lists what was done, so a check can say which fault it proved."""

    def __init__(self, st: EngineState) -> None:
        self.st = st
        self.injected: list[str] = []

    def inject(self, kind: str) -> bool:
        """Inject now; False if the state does not allow it yet (e.g. nothing cached)."""
        if kind not in FAULTS:
            raise InputError(f"unknown fault {kind!r}; valid: {', '.join(FAULTS)}")
        done = getattr(self, "_" + kind.replace("-", "_"))()
        if done:
            self.injected.append(kind)
        return done

    def ready(self, kind: str) -> bool:
        """Whether the state lets `kind` be injected and then exercised: alloc-fail needs an
        admission still to come, lock-leak something cached, leak a free page."""
        st = self.st
        if kind == "alloc-fail":
            return bool(st.waiting) or bool(st.future)
        if kind == "lock-leak":
            return st.sg.tree_cache.evictable_size() > 0 or st.sg.tree_cache.protected_size() > 0
        return st.sg.allocator.available_size() >= st.config.page_size

    def _leak(self) -> bool:
        page = self.st.config.page_size
        slots = self.st.sg.allocator.alloc(page)
        return slots is not None

    def _lock_leak(self) -> bool:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        st = self.st
        tree = st.sg.tree_cache
        for tracked in list(st.by_rid.values()):
            req = tracked.req
            if len(req.origin_input_ids) < st.config.page_size:
                continue
            match = tree.match_prefix(MatchPrefixParams(key=RadixKey(
                token_ids=req.origin_input_ids, extra_key=req.extra_key, cache_salt=req.cache_salt)))
            if match.device_prefix_len > 0:
                tree.lock(match.last_device_node)  # deliberately never released
                return True
        return False

    def _alloc_fail(self) -> bool:
        self.st.digest_admissions = True  # prove the rollback restores the digest
        allocator = self.st.sg.allocator
        original = allocator.alloc_extend

        @functools.wraps(original)
        def fail_once(*args, **kwargs):
            allocator.alloc_extend = original
            return None

        allocator.alloc_extend = fail_once
        return True

"""Preemption: freeing memory that running work needs, in SGLang's terms.

    make_room   memory held on the side goes first, until the caller's `fits()` holds:
                retention leases (oldest first: a paused session yields to running
                work), then partially prefilled requests (newest first; their published
                chunks stay cached)
    retract     SGLang's retraction: free a request's row without publishing its private
                part, requeue it at the head of `waiting` for recompute
    abort       SGLang's out-of-memory abort of a request that cannot continue even
                alone: free its row unpublished (the caller reports it finished)
"""

from __future__ import annotations

from collections.abc import Callable

from engine_adapter.embedded.leases import Leases
from engine_adapter.embedded.requests import RequestState, Tracked
from engine_adapter.embedded.state import EngineState


class Preemption:
    """Retracts and aborts requests that hold rows, and frees side memory on demand.

    Mutates SGLang's tree, allocator and `req_to_token` pool (through `release_kv_cache`),
    the `Req`s it preempts (`reset_for_retract`), `st.waiting` / `st.partial`, the
    retraction and allocation-failure counters and the receipts. Raises nothing of its own."""

    def __init__(self, st: EngineState, leases: Leases) -> None:
        self.st = st
        self.leases = leases

    def retract(self, tr: Tracked) -> None:
        """Preempt a request that holds a row: free it without publishing its private part
        (what it already published stays cached), requeue it for recompute."""
        from sglang.srt.mem_cache.common import release_kv_cache

        st, req = self.st, tr.req
        seqlen = req.kv.kv_committed_len
        release_kv_cache(req, st.sg.tree_cache, checkpoint=False)
        req.reset_for_retract()
        tr.state = RequestState.WAITING
        st.counters.retractions += 1
        st.counters.retracted_tokens += seqlen
        st.receipt(kind="retraction", start_s=st.clock_s, end_s=st.clock_s, tokens=seqlen,
                   namespace=tr.namespace_label, request=req.rid)
        st.waiting.appendleft(tr)

    def make_room(self, fits: Callable[[], bool]) -> bool:
        """Free memory held on the side until `fits()`: retention leases first (oldest
        first), then partially prefilled requests (newest first). Returns `fits()`."""
        st = self.st
        while not fits():
            if self.leases.revoke_oldest():
                continue
            if st.partial:
                self.retract(st.partial.pop())
                continue
            return False
        return True

    def release_aborted(self, tr: Tracked) -> None:
        """Free the row of a request being aborted for lack of memory, unpublished, and
        count the allocation failure. Its finish record is the caller's (`Retention.abort`)."""
        from sglang.srt.mem_cache.common import release_kv_cache

        release_kv_cache(tr.req, self.st.sg.tree_cache, checkpoint=False)
        self.st.counters.allocation_failures += 1

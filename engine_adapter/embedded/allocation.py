"""Prefill allocation: SGLang's paged K/V allocation for the requests admission picked.

Two paths make the same tree and allocator calls (tests/integration/
test_replay_call_fidelity.py compares them call by call):

    direct          `DirectCache.extend` (cache_ops.py): the calls `alloc_for_extend` makes
    exact batches   SGLang's `ScheduleBatch.prepare_for_extend()` (`EngineConfig.
                    exact_batches`, or a tiny model whose forward pass needs the batch)

Both evict from the tree when the pool is short. An allocation that fails with SGLang's
out-of-memory error (`cache_ops.is_out_of_memory`, nothing else) rolls the whole step's
admission back; any other error propagates.

The plan's slots, request after request, as SGLang's batch holds them:

    out_cache_loc: | req 0: extend_lens[0] | req 1: extend_lens[1] | ... |
                   ^ 0                     ^ extend_lens[0]
    request i's slots: out_cache_loc[sum(extend_lens[:i]) : sum(extend_lens[:i + 1])]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_adapter.embedded.hicache import start_loading
from engine_adapter.embedded.requests import RequestState, Tracked
from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
from engine_adapter.embedded.state import EngineState


@dataclass
class PrefillPlan:
    """The prefill part of one step. `out_cache_loc` / `extend_lens`: the slots allocated,
    request after request, as SGLang's batch holds them (reloads read their span there)."""

    allocated: bool = False
    batch: object | None = None  # sglang ScheduleBatch, on the exact-batches path only
    members: list[Tracked] = field(default_factory=list)
    computed_tokens: int = 0
    loaded_tokens: int = 0  # K/V tokens HiCache loaded host -> device for it (hicache.py)
    out_cache_loc: object | None = None
    extend_lens: list[int] = field(default_factory=list)


class Allocation:
    """Owns the K/V memory side of a prefill: binds rows and allocates slots, or undoes
    the step's admissions when SGLang's allocator runs out.

    `allocate` mutates SGLang's `req_to_token` pool, allocator and tree (eviction), each
    `Req`'s `kv` record, and on failure the queues, locks and `Tracked.state` (see
    `_rollback`) and `counters.allocation_failures`. It raises whatever SGLang raises
    that is not its out-of-memory error. `cache`: the direct cache path, or None for
    SGLang's ScheduleBatch path."""

    def __init__(self, st: EngineState, cache=None) -> None:
        self.st = st
        self.cache = cache

    def allocate(self, plan: PrefillPlan, chosen: list[Tracked], origins: list[str]) -> bool:
        """SGLang's paged allocation for the chosen requests into `plan`; False when the
        pool was short (everything rolled back, `plan.batch` None)."""
        from engine_adapter.embedded.cache_ops import is_out_of_memory

        st = self.st
        reqs = [t.req for t in chosen]
        try:
            if self.cache is not None:
                # the load-backs admission queued (hicache.py)
                plan.loaded_tokens = start_loading(st.sg.tree_cache)
                plan.out_cache_loc, plan.extend_lens = self.cache.extend(reqs)
            else:
                plan.batch, plan.loaded_tokens = self._prepare_batch(reqs)
                plan.out_cache_loc, plan.extend_lens = plan.batch.out_cache_loc, plan.batch.extend_lens
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
            plan.batch, plan.loaded_tokens = None, 0  # no prefill step to price its loads in
            st.counters.allocation_failures += 1
            self._rollback(chosen, origins)
            return False
        return True

    def _prepare_batch(self, reqs: list):
        """The exact-batches path: a ScheduleBatch and its prepare_for_extend(); returns it
        and the tokens HiCache loaded back for it."""
        import torch
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        sg = self.st.sg
        batch = ScheduleBatch.init_new(
            reqs, sg.req_to_token_pool, sg.allocator, sg.tree_cache, sg.model_config,
            False, SpeculativeAlgorithm.NONE,
        )
        loaded = start_loading(sg.tree_cache)  # scheduler.py: init_new, ready_to_load_host_cache, prepare
        with stdout_to_stderr():
            batch.prepare_for_extend()
        batch.output_ids = torch.zeros(len(reqs), dtype=torch.int64, device=batch.device)
        return batch, loaded

    def _rollback(self, chosen: list[Tracked], origins: list[str]) -> None:
        """Undo admissions whose allocation failed: request rows, locks, queue positions.

        SGLang's `prepare_for_extend` binds rows to new requests before it allocates K/V;
        when the K/V allocation fails those rows are returned here, new requests unlock
        their matched node and go back to the head of the waiting queue in order, and
        continuing requests (which keep their rows) go back to the partial queue.
        """
        st = self.st
        for tr, origin in reversed(list(zip(chosen, origins))):
            req = tr.req
            req.extend_end = None
            if origin == "partial":
                st.partial.appendleft(tr)
                continue
            if req.kv.holds_kv:
                st.sg.req_to_token_pool.free(req)
                req.kv.req_pool_idx = None
            if req.lock is not None:
                st.sg.tree_cache.unlock(req.lock)
                req.lock = None
            tr.state = RequestState.WAITING
            st.waiting.appendleft(tr)


def state_digest(st: EngineState) -> tuple:
    """Everything an admission may change, with cache content folded out: free and
    evictable are summed, since evicting unlocked cache is not an admission side effect."""
    sg = st.sg
    return (
        sg.allocator.available_size() + sg.tree_cache.evictable_size(),
        sg.tree_cache.protected_size(),
        len(sg.req_to_token_pool.free_slots),
        tuple(t.spec.rid for t in st.waiting),
        tuple(t.spec.rid for t in st.partial),
        tuple(sorted(st.running)),
        tuple(sorted(st.leases)),
    )

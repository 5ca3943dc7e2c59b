"""Prefill admission and completion: kvctl's scheduler loop around SGLang's helpers.

Per step, under a token budget (chunked prefill, seed 003):

1. continue partially prefilled requests (they hold their rows; no new match);
2. admit waiting requests in arrival order: authorize the namespace before the tree is
   consulted, match with SGLang's `Req.init_next_round_input(tree_cache)` (S_cap = S-1,
   page aligned), lock the matched node, check capacity (free + evictable - decode reserve)
   and the admission ceiling, and size the chunk;
3. allocate: on the direct path (`DirectCache.extend`, the calls `alloc_for_extend`
   makes), or, with `EngineConfig.exact_batches` or a tiny model, through SGLang's
   `ScheduleBatch.prepare_for_extend()`; both are paged allocations that evict when short.
   A failed allocation (SGLang's out-of-memory error, nothing else) rolls the admission back.

After the modeled forward, a request whose prompt is not done is published with
`checkpoint_kv_cache` (as SGLang does for chunked requests); a finished prefill gets its
first output token and joins the decode batch or finishes.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field

import numpy as np

from engine_adapter.embedded.requests import Tracked
from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
from engine_adapter.embedded.state import EngineState, RollbackDigests
from engine_adapter.instrument.funnel_recorder import AdmissionFacts


def namespace_label(namespace: str, salt: str) -> str:
    """Low-cardinality label for a namespace: never the raw tenant string, and salted so
    a guessable tenant name cannot be recovered from it (seed 000 0x0CE). The label is
    also the SGLang `cache_salt`, so it partitions the radix tree."""
    return "ns-" + hashlib.sha256(f"{salt}\0{namespace}".encode()).hexdigest()[:12]


@dataclass
class PrefillPlan:
    """The prefill part of one step. `out_cache_loc` / `extend_lens`: the slots allocated,
    request after request, as SGLang's batch holds them (reloads read their span there)."""

    allocated: bool = False
    batch: object | None = None  # sglang ScheduleBatch, on the exact-batches path only
    members: list[Tracked] = field(default_factory=list)
    computed_tokens: int = 0
    out_cache_loc: object | None = None
    extend_lens: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Blocked:
    """The waiting head was refused with nothing admitted this step (see still_blocked)."""

    rid: str
    marks: tuple
    need: int | None  # tokens its admission needed (None: refused before _fits, no deferral)
    evictable: int  # the tree's evictable tokens it was checked with (its own path locked)
    reserve: int  # the decode reserve it was checked with


class Prefill:
    """Admission, allocation and completion of prefill work. `cache`: the direct cache
    path, or None for SGLang's ScheduleBatch path (forward passes, the test oracle)."""

    def __init__(self, st: EngineState, retention, cache=None) -> None:
        self.st = st
        self.retention = retention
        self.cache = cache
        self.blocked: Blocked | None = None
        self._last_fit: tuple | None = None  # (rid, need, evictable) of the head's last _fits

    # ---- admission ---------------------------------------------------------------------

    def schedule(self, budget: int, decode_reserve: int) -> PrefillPlan:
        """Pick and allocate this step's prefill work. Mutates queues, locks, allocator."""
        st = self.st
        plan = PrefillPlan()
        page = st.config.page_size
        before = state_digest(st) if st.digest_admissions else None
        chosen: list[Tracked] = []
        origins: list[str] = []
        # Partially prefilled requests (chunk continuations, completed reloads) first.
        while st.partial and budget >= page:
            tr = st.partial[0]
            req = tr.req
            remaining = len(req.full_untruncated_fill_ids) - req.prefix_len
            take = self._chunk(req.prefix_len, remaining, budget)
            if take <= 0 or not self._fits(take, req.prefix_len, decode_reserve, chosen, new=False):
                break
            st.partial.popleft()
            req.init_next_round_input()  # refresh fill ids only: the row is already held
            req.extend_end = req.prefix_len + take
            budget -= take
            plan.computed_tokens += take
            chosen.append(tr)
            origins.append("partial")
        self.blocked = None
        self._last_fit = None
        while st.waiting and budget >= page and len(st.live_tracked()) + len(chosen) < st.config.max_running_requests:
            tr = st.waiting[0]
            outcome = self._admit(tr, budget, decode_reserve, chosen)
            if outcome is None:
                break
            st.waiting.popleft()
            budget -= outcome
            plan.computed_tokens += outcome
            chosen.append(tr)
            origins.append("waiting")
        if st.waiting and not chosen:
            attempted = self._last_fit is not None and self._last_fit[0] == st.waiting[0].spec.rid
            self.blocked = Blocked(rid=st.waiting[0].spec.rid, marks=self._marks(),
                                   need=self._last_fit[1] if attempted else None,
                                   evictable=self._last_fit[2] if attempted else 0,
                                   reserve=decode_reserve)
        self._last_fit = None
        if chosen:
            plan.allocated = self._allocate(plan, chosen, origins)
            if not plan.allocated:
                plan.computed_tokens = 0
                st.last_rollback = RollbackDigests(before, state_digest(st) if st.digest_admissions else None)
                st.last_rollback_step = st.counters.steps
            else:
                plan.members = chosen
                for tr, origin in zip(chosen, origins):
                    if origin == "waiting":
                        self.retention.on_admit(tr)
        return plan

    def _marks(self) -> tuple:
        """What can change a refused head's next attempt: a finish or abort, a retraction,
        a revoked lease (all free memory or change the tree), a generation bump (changes
        its key), an eviction (may shorten its match: it would need more, but by how much
        only a new match says)."""
        c = self.st.counters
        return (c.requests_finished, c.retractions, len(self.st.leases), self.st.generation,
                c.evictions)

    def still_blocked(self) -> Blocked | None:
        """The last step's refusal of the waiting head, if it must stand this step too.

        Admission of the head was refused (capacity, the ceiling, max running or the
        token budget) with nothing else admitted; with only decoding since (no eviction),
        the tree and the running set are unchanged and free memory only shrank, so the
        same match and a refusal follow (`deferred_at` says which kind).
        None when anything in `_marks` moved or the head changed."""
        st, blocked = self.st, self.blocked
        if blocked is None or not st.waiting or st.waiting[0].spec.rid != blocked.rid:
            return None
        return blocked if blocked.marks == self._marks() else None

    def deferred_at(self, available: int) -> bool:
        """Whether the blocked head's refusal, repeated with `available` free tokens and
        nothing else changed, is the admission ceiling's (counted as a deferral) rather
        than capacity's: `_fits` for a new request with nothing else chosen."""
        st, blocked = self.st, self.blocked
        if blocked is None or blocked.need is None or st.config.tau_high is None:
            return False
        evictable = blocked.evictable
        if blocked.need + blocked.reserve > available + evictable:
            return False
        pool = st.sg.allocator.size
        return (pool - available - evictable + blocked.need) / pool > st.config.tau_high

    def _chunk(self, prefix_len: int, remaining: int, budget: int) -> int:
        """Tokens to compute now: all if they fit, else a page-aligned chunk end."""
        if remaining <= budget:
            return remaining
        page = self.st.config.page_size
        end = (prefix_len + budget) // page * page
        return end - prefix_len

    def _fits(self, tokens: int, prefix_len: int, decode_reserve: int, chosen: list[Tracked],
              *, new: bool = True) -> bool:
        """Capacity (free + evictable) for `tokens` new slots, and for a new admission the
        ceiling. A continuing request is never held back by the ceiling: it already holds
        memory, and stalling it could only deadlock."""
        st = self.st
        page = st.config.page_size
        need = -(-(prefix_len + tokens) // page) * page - (prefix_len // page) * page
        if new and not chosen and st.waiting:  # the head's own path is locked now
            self._last_fit = (st.waiting[0].spec.rid, need, st.sg.tree_cache.evictable_size())
        pending = sum(-(-(t.req.extend_end) // page) * page - (t.req.prefix_len // page) * page for t in chosen)
        free = st.sg.allocator.available_size() + st.sg.tree_cache.evictable_size()
        if need + pending + decode_reserve > free:
            return False
        tau = st.config.tau_high
        if new and tau is not None and (st.live_tracked() or chosen):
            pool = st.sg.allocator.size
            locked = pool - st.sg.allocator.available_size() - st.sg.tree_cache.evictable_size()
            # Ceiling on non-reclaimable use (SGLang's token_usage): evictable cache is
            # reclaimable on demand, counting it would make a warm cache look full forever.
            if (locked + pending + need) / pool > tau:
                st.counters.admission_deferrals += 1
                return False
        return True

    def _admit(self, tr: Tracked, budget: int, decode_reserve: int, chosen: list[Tracked]) -> int | None:
        """Match, lock and size one waiting request; None leaves it waiting (rolled back)."""
        st = self.st
        spec, req = tr.spec, tr.req
        authorized = self._authorized(spec)
        own = spec.read_namespace if authorized else spec.tenant
        tr.namespace_label = namespace_label(own, st.namespace_salt)
        tr.generation = st.generation
        tr.key = (tr.namespace_label, st.generation)
        req.cache_salt = tr.namespace_label
        req.extra_key = f"gen{st.generation}"
        tree = st.sg.tree_cache
        if authorized:
            req.init_next_round_input(tree)
        else:  # refused before the tree is consulted: no lookup at all
            req.init_next_round_input(None)
            req.prefix_len = 0
            req.last_node = tree.root_node_handle(req.extra_key)
            req.kv.cache_protected_len = 0
        fill = req.full_untruncated_fill_ids
        s_cap = max(len(fill) - 1, 0)
        req.lock = tree.lock(req.last_node)
        host = self.retention.host_plan(tr, s_cap) if authorized else None
        reload = host is not None and host.reload
        if reload:
            take = host.end - req.prefix_len  # allocate the reload span; no compute now
        else:
            take = self._chunk(req.prefix_len, len(fill) - req.prefix_len, budget)
        chunking = not reload and req.prefix_len + take < len(fill)
        if chunking and (st.partial or any(_is_chunking(t) for t in chosen)):
            take = 0  # one chunked prefill at a time, as SGLang's scheduler does
        if take <= 0 or not self._fits(take, req.prefix_len, decode_reserve, chosen):
            tree.unlock(req.lock)
            req.lock = None
            return None
        req.extend_end = req.prefix_len + take
        tr.admitted_s = st.clock_s if tr.admitted_s is None else tr.admitted_s
        if not tr.funnel_done:
            s_any, s_ns, s_sem = st.oracle.lengths(tr.key, fill, s_cap) if authorized else (0, 0, 0)
            tr.facts = AdmissionFacts(
                s_prompt=len(spec.tokens), s_cap=s_cap, authorized=authorized,
                s_any=s_any, s_ns=s_ns, s_sem=s_sem,
                s_indexed=req.prefix_len + (host.end - req.prefix_len if host else 0),
                leased=True, mapped=host is None or host.reload, snapshot_current=True,
                s_runtime=req.prefix_len,
            )
        if reload:
            tr.state = "reloading"
            tr.reload_required_end = host.end
            tr.reload_tokens = host.end - req.prefix_len
            return 0
        tr.state = "prefill"
        return take

    def _authorized(self, spec) -> bool:
        namespace = spec.read_namespace
        return namespace == spec.tenant or namespace in self.st.config.authorized.get(spec.tenant, ())

    def _allocate(self, plan: PrefillPlan, chosen: list[Tracked], origins: list[str]) -> bool:
        """SGLang's paged allocation for the chosen requests; rolls back on failure."""
        from engine_adapter.embedded.cache_ops import is_out_of_memory

        st = self.st
        reqs = [t.req for t in chosen]
        try:
            if self.cache is not None:
                plan.out_cache_loc, plan.extend_lens = self.cache.extend(reqs)
            else:
                plan.batch = self._prepare_batch(reqs)
                plan.out_cache_loc, plan.extend_lens = plan.batch.out_cache_loc, plan.batch.extend_lens
        except RuntimeError as err:
            if not is_out_of_memory(err):
                raise
            plan.batch = None
            st.counters.allocation_failures += 1
            self._rollback(chosen, origins)
            return False
        return True

    def _prepare_batch(self, reqs: list):
        """The exact-batches path: a ScheduleBatch and its prepare_for_extend()."""
        import torch
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        sg = self.st.sg
        batch = ScheduleBatch.init_new(
            reqs, sg.req_to_token_pool, sg.allocator, sg.tree_cache, sg.model_config,
            False, SpeculativeAlgorithm.NONE,
        )
        with stdout_to_stderr():
            batch.prepare_for_extend()
        batch.output_ids = torch.zeros(len(reqs), dtype=torch.int64, device=batch.device)
        return batch

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
            tr.state = "waiting"
            st.waiting.appendleft(tr)

    # ---- completion --------------------------------------------------------------------

    def complete(self, plan: PrefillPlan, tokens: dict[str, int] | None = None) -> None:
        """Post-forward: publish chunks, emit first tokens (the model's, when one ran;
        else synthetic), start reloads."""
        if not plan.allocated:
            return
        st = self.st
        keep: list[int] = []
        last_tokens: list[int] = []
        for index, tr in enumerate(plan.members):
            req = tr.req
            if tr.state == "reloading":
                self.retention.start_reload(tr, plan, index)
                last_tokens.append(0)
                continue
            self.retention.record_funnel(tr)
            # [0, prefix_len) was matched or computed under this key before: record the rest.
            st.oracle.record(tr.key, req.full_untruncated_fill_ids, req.extend_end, known=req.prefix_len)
            if req.extend_end < len(req.full_untruncated_fill_ids):
                from sglang.srt.mem_cache.common import checkpoint_kv_cache

                checkpoint_kv_cache(req, st.sg.tree_cache)
                tr.state = "prefill"
                st.partial.append(tr)
                last_tokens.append(0)
                continue
            token = tokens[req.rid] if tokens is not None else st.next_output_token()
            req.output_ids.append(token)
            tr.first_token_s = tr.last_token_s = st.clock_s
            req.update_finish_state()
            last_tokens.append(token)
            if req.finished():
                self.retention.finish(tr)
            else:
                from sglang.srt.mem_cache.common import checkpoint_kv_cache

                checkpoint_kv_cache(req, st.sg.tree_cache)
                tr.state = "running"
                st.running[req.rid] = tr
                keep.append(index)
        if plan.batch is None or st.config.decode_quantum > 1:
            return  # the direct path and quantum decode read the decode set from st.running
        import torch

        batch = plan.batch
        batch.output_ids = torch.tensor(last_tokens, dtype=torch.int64, device=batch.device)
        batch.filter_batch(keep_indices=keep)
        if batch.reqs:
            if st.running_batch is None or st.running_batch.is_empty():
                st.running_batch = batch
            else:
                st.running_batch.merge_batch(batch)


def state_digest(st: EngineState) -> tuple:
    """Everything an admission may change, with cache content folded out: free and
    evictable are summed, since evicting unlocked cache is not an admission side effect."""
    sg = st.sg
    return (
        sg.allocator.available_size() + sg.tree_cache.evictable_size(),
        sg.tree_cache.protected_size(),
        len(sg.req_to_token_pool.free_slots),
        tuple(t.req.rid for t in st.waiting),
        tuple(t.req.rid for t in st.partial),
        tuple(sorted(st.running)),
        tuple(sorted(st.leases)),
    )


def _is_chunking(tr: Tracked) -> bool:
    return tr.state == "prefill" and tr.req.extend_end < len(tr.req.full_untruncated_fill_ids)


def to_token_array(tokens: np.ndarray) -> array:
    """int64 numpy tokens to the `array('q')` SGLang's Req expects."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(tokens, dtype="<i8").tobytes())
    return out

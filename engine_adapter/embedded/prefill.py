"""Prefill admission and completion: kvctl's scheduler loop around SGLang's helpers.

Per step, under a token budget (chunked prefill, seed 003):

1. continue partially prefilled requests (they hold their rows; no new match);
2. admit waiting requests in arrival order: authorize the namespace before the tree is
   consulted, match with SGLang's `Req.init_next_round_input(tree_cache)` (S_cap = S-1,
   page aligned), lock the matched node, check capacity (free + evictable - decode reserve)
   and the admission ceiling, and size the chunk;
3. allocate through SGLang's `ScheduleBatch.prepare_for_extend()` (paged allocation that
   evicts when short). A failed allocation rolls the admission back.

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
from engine_adapter.embedded.state import EngineState
from engine_adapter.instrument.funnel_recorder import AdmissionFacts


def namespace_label(namespace: str, salt: str) -> str:
    """Low-cardinality label for a namespace: never the raw tenant string, and salted so
    a guessable tenant name cannot be recovered from it (seed 000 0x0CE). The label is
    also the SGLang `cache_salt`, so it partitions the radix tree."""
    return "ns-" + hashlib.sha256(f"{salt}\0{namespace}".encode()).hexdigest()[:12]


@dataclass
class PrefillPlan:
    """The prefill part of one step."""

    batch: object | None = None  # sglang ScheduleBatch
    members: list[Tracked] = field(default_factory=list)
    computed_tokens: int = 0


class Prefill:
    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention

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
        if chosen:
            plan.batch = self._allocate(chosen, origins)
            if plan.batch is None:
                plan.computed_tokens = 0
                st.last_rollback = (before, state_digest(st) if st.digest_admissions else None)
                st.last_rollback_step = st.counters.steps
            else:
                plan.members = chosen
                for tr, origin in zip(chosen, origins):
                    if origin == "waiting":
                        self.retention.on_admit(tr)
        return plan

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

    def _allocate(self, chosen: list[Tracked], origins: list[str]):
        """SGLang's paged allocation for the chosen requests; rolls back on failure."""
        import torch
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        st = self.st
        sg = st.sg
        reqs = [t.req for t in chosen]
        batch = ScheduleBatch.init_new(
            reqs, sg.req_to_token_pool, sg.allocator, sg.tree_cache, sg.model_config,
            False, SpeculativeAlgorithm.NONE,
        )
        try:
            with stdout_to_stderr():
                batch.prepare_for_extend()
        except RuntimeError:
            st.counters.allocation_failures += 1
            self._rollback(chosen, origins)
            return None
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
        if plan.batch is None:
            return
        import torch

        st = self.st
        batch = plan.batch
        keep: list[int] = []
        last_tokens: list[int] = []
        for index, tr in enumerate(plan.members):
            req = tr.req
            if tr.state == "reloading":
                self.retention.start_reload(tr, batch, index)
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
        if st.config.decode_quantum > 1:
            return  # quantum decode builds its own batch each step from st.running
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

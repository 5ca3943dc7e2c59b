"""What happens to a finished turn's K/V while its session waits on a tool (seed 003 §6).

    retain   the path stays locked (a retention lease) until the session's next turn is
             admitted: it cannot be evicted, and it occupies HBM for the whole wait.
    drop     the path is published unlocked (evictable); an evicted part is recomputed.
    offload  the K/V is copied to the host tier (real bytes with a real KV pool; modeled
             bytes = tokens x m_token), then published unlocked like drop. On the next
             turn, whatever SGLang's eviction reclaimed meanwhile is reloaded from the host
             tier instead of recomputed, when the reload beats recompute (seed 003
             break-even, reload S*m/B vs recompute 2PS/R); the request cannot run until
             the reload is resident (mapping lag, seed 000 0x06).

Device pages of an offloaded turn are not freed eagerly: like SGLang's HiCache write-back,
the device copy stays evictable and is reclaimed by the tree's own policy under pressure.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine_adapter.embedded.requests import FinishedRecord, Tracked
from engine_adapter.embedded.state import EngineState, RetentionLease


@dataclass(kw_only=True)
class HostEntry:
    session: str
    key: tuple[str, int]
    tokens: np.ndarray  # the offloaded context [0, length)
    length: int
    layers_k: list[Any] | None  # per-layer K rows on the host (real pools only)
    layers_v: list[Any] | None
    stored_s: float


@dataclass(frozen=True)
class HostPlan:
    end: int  # host tier supplies [prefix_len, end)
    reload: bool  # reload beats recompute


class Retention:
    def __init__(self, st: EngineState) -> None:
        self.st = st
        self.host: OrderedDict[str, HostEntry] = OrderedDict()

    # ---- turn end ----------------------------------------------------------------------

    def finish(self, tr: Tracked, *, released: bool = False) -> None:
        """Release a finished request's row the way its session's policy says.

        released: SGLang already freed the row (an aborted decode); only bookkeeping remains.
        """
        from sglang.srt.mem_cache.common import release_kv_cache

        st = self.st
        req, spec = tr.req, tr.spec
        policy = None
        if spec.session is not None and not spec.last_turn:
            policy = spec.retention or st.config.default_retention
        if released:
            policy = None
        else:
            if policy == "offload":
                self._offload(tr)
            req.refresh_fill_ids()  # decode tokens reach the fill array only on refresh
            st.oracle.record(tr.key, req.full_untruncated_fill_ids, req.kv.kv_committed_len,
                             known=req.kv.cache_protected_len, chain=tr.chain)
            release_kv_cache(req, st.sg.tree_cache, checkpoint=True)
        if policy == "retain":
            self._take_lease(tr)
        tr.state = "finished"
        st.leave_running(tr)
        st.counters.requests_finished += 1
        outputs = np.frombuffer(req.output_ids, dtype=np.int64).copy()
        st.counters.decode_tokens += len(outputs)
        st.finished.append(
            FinishedRecord(
                rid=req.rid,
                session=spec.session,
                finish_s=st.clock_s,
                output_ids=outputs,
                prompt_tokens=len(spec.tokens),
                hit_tokens=tr.hit_tokens,
                ttft_s=_or_now(tr.first_token_s, st.clock_s) - spec.arrival_s,
                itl_s=tuple(tr.itl),
                queue_s=_or_now(tr.admitted_s, st.clock_s) - spec.arrival_s,
            )
        )
        st.by_rid.pop(req.rid, None)

    def _take_lease(self, tr: Tracked) -> None:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        st, req = self.st, tr.req
        tree = st.sg.tree_cache
        match = tree.match_prefix(
            MatchPrefixParams(
                key=RadixKey(token_ids=req.full_untruncated_fill_ids, extra_key=req.extra_key,
                             cache_salt=req.cache_salt)
            )
        )
        old = st.leases.pop(tr.spec.session, None)
        if old is not None:
            tree.unlock(old.lock)
        lock = tree.lock(match.last_device_node)
        st.leases[tr.spec.session] = RetentionLease(
            session=tr.spec.session, lock=lock, node_id=match.last_device_node,
            tokens=match.device_prefix_len, since_s=st.clock_s,
        )

    def _offload(self, tr: Tracked) -> None:
        st, req = self.st, tr.req
        req.refresh_fill_ids()  # the fill array lags output_ids until refreshed
        length = req.kv.kv_committed_len
        slots = st.sg.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :length].to(dtype=__import__("torch").int64)
        layers_k = layers_v = None
        if st.config.kv_pool == "mha":  # real bytes: SGLang's pool buffers, per layer
            pool = st.sg.kv_pool
            # the host tier is host memory whatever the pool's device (indexing copies)
            layers_k = [pool.get_key_buffer(i)[slots].cpu() for i in range(pool.layer_num)]
            layers_v = [pool.get_value_buffer(i)[slots].cpu() for i in range(pool.layer_num)]
        tokens = np.frombuffer(req.full_untruncated_fill_ids, dtype=np.int64, count=length).copy()
        self.host[tr.spec.session] = HostEntry(
            session=tr.spec.session, key=tr.key, tokens=tokens, length=length,
            layers_k=layers_k, layers_v=layers_v, stored_s=st.clock_s,
        )
        self.host.move_to_end(tr.spec.session)
        nbytes = st.cost.kv_bytes(length)
        st.counters.offloaded_tokens += length
        st.counters.offload_bytes += nbytes
        end = st.clock_s + st.cost.transfer_seconds(length)
        st.receipt(kind="offload", start_s=st.clock_s, end_s=end, tokens=length, nbytes=nbytes,
                   namespace=tr.namespace_label, request=req.rid)
        self._enforce_host_capacity()

    def _enforce_host_capacity(self) -> None:
        cap = self.st.config.host_capacity_tokens
        while cap is not None and self.host and self.host_tokens > cap:
            self.host.popitem(last=False)

    @property
    def host_tokens(self) -> int:
        return sum(e.length for e in self.host.values())

    # ---- next turn ---------------------------------------------------------------------

    def host_plan(self, tr: Tracked, s_cap: int) -> HostPlan | None:
        """How much of this request's prefix the host tier can supply beyond the device hit."""
        st, req = self.st, tr.req
        entry = self.host.get(tr.spec.session) if tr.spec.session else None
        if entry is None or entry.key != tr.key:
            return None
        page = st.config.page_size
        end = min(entry.length, s_cap) // page * page
        if end <= req.prefix_len:
            return None
        fill = np.frombuffer(req.full_untruncated_fill_ids, dtype=np.int64, count=end)
        if not np.array_equal(fill, entry.tokens[:end]):
            return None
        tokens = end - req.prefix_len
        return HostPlan(end=end, reload=st.cost.transfer_seconds(tokens) <= st.cost.prefill_seconds(tokens))

    def on_admit(self, tr: Tracked) -> None:
        """A session's next turn holds its own lock now: drop the retention lease."""
        session = tr.spec.session
        if session is None:
            return
        lease = self.st.leases.pop(session, None)
        if lease is not None:
            self.st.sg.tree_cache.unlock(lease.lock)
        if tr.state != "reloading":
            self.host.pop(session, None)

    def revoke_oldest_lease(self) -> bool:
        """Nothing runs and nothing fits: demote the oldest retained path to evictable."""
        st = self.st
        if not st.leases:
            return False
        session = min(st.leases, key=lambda s: st.leases[s].since_s)
        lease = st.leases.pop(session)
        st.sg.tree_cache.unlock(lease.lock)
        st.receipt(kind="eviction", start_s=st.clock_s, end_s=st.clock_s, tokens=lease.tokens,
                   outcome="lease_revoked")
        return True

    def retract(self, tr: Tracked) -> None:
        """Preempt a request that holds a row: free it without publishing its private part
        (what it already published stays cached), requeue it for recompute."""
        from sglang.srt.mem_cache.common import release_kv_cache

        st, req = self.st, tr.req
        seqlen = req.kv.kv_committed_len
        release_kv_cache(req, st.sg.tree_cache, checkpoint=False)
        req.reset_for_retract()
        tr.state = "waiting"
        st.counters.retractions += 1
        st.counters.retracted_tokens += seqlen
        st.receipt(kind="retraction", start_s=st.clock_s, end_s=st.clock_s, tokens=seqlen,
                   namespace=tr.namespace_label, request=req.rid)
        st.waiting.appendleft(tr)

    def make_room(self, fits) -> bool:
        """Free memory held on the side until `fits()`: retention leases first (oldest
        first: a paused session yields to running work), then partially prefilled requests
        (newest first; their published chunks stay cached). Returns `fits()`."""
        st = self.st
        while not fits():
            if self.revoke_oldest_lease():
                continue
            if st.partial:
                self.retract(st.partial.pop())
                continue
            return False
        return True

    def abort(self, tr: Tracked) -> None:
        """End a request that cannot continue even alone: free its row unpublished and
        report it finished with the tokens it has (SGLang's out-of-memory abort)."""
        from sglang.srt.mem_cache.common import release_kv_cache

        release_kv_cache(tr.req, self.st.sg.tree_cache, checkpoint=False)
        self.st.counters.allocation_failures += 1
        self.finish(tr, released=True)

    # ---- reloads -----------------------------------------------------------------------

    def start_reload(self, tr: Tracked, batch: Any, index: int) -> None:
        """Slots for [prefix, end) were just allocated: fill them from the host tier."""
        st, req = self.st, tr.req
        entry = self.host.pop(tr.spec.session)
        offset = sum(batch.extend_lens[:index])
        n = tr.reload_tokens
        slots = batch.out_cache_loc[offset : offset + n].to(dtype=__import__("torch").int64)
        if entry.layers_k is not None:
            pool = st.sg.kv_pool
            lo, hi = req.prefix_len, req.prefix_len + n
            for layer in range(pool.layer_num):
                keys, values = pool.get_key_buffer(layer), pool.get_value_buffer(layer)
                keys[slots] = entry.layers_k[layer][lo:hi].to(keys.device)
                values[slots] = entry.layers_v[layer][lo:hi].to(values.device)
        tr.reload_start_s = st.clock_s
        tr.reload_ready_s = st.clock_s + st.cost.transfer_seconds(n)
        nbytes = st.cost.kv_bytes(n)
        st.counters.reloaded_tokens += n
        st.counters.reload_bytes += nbytes
        st.receipt(kind="reload", start_s=tr.reload_start_s, end_s=tr.reload_ready_s, tokens=n,
                   nbytes=nbytes, namespace=tr.namespace_label, request=req.rid)
        st.reloading.append(tr)

    def complete_reloads(self) -> None:
        """Reloads whose modeled transfer is done become chunk continuations; a reload that
        a generation bump made stale is discarded and the request recomputes."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

        st = self.st
        still = []
        for tr in st.reloading:
            if tr.reload_ready_s > st.clock_s:
                still.append(tr)
                continue
            req = tr.req
            st.counters.mapping_stalls += 1
            st.counters.mapping_stall_seconds += tr.reload_ready_s - tr.reload_start_s
            if tr.generation != st.generation:
                tr.facts = _replace(tr.facts, snapshot_current=False, s_runtime=0)
                release_kv_cache(req, st.sg.tree_cache, checkpoint=False)
                req.reset_for_retract()
                tr.state = "waiting"
                self.record_funnel(tr)
                st.waiting.appendleft(tr)
                continue
            checkpoint_kv_cache(req, st.sg.tree_cache)
            tr.facts = _replace(tr.facts, s_runtime=tr.reload_required_end)
            self.record_funnel(tr)
            tr.state = "prefill"
            st.partial.append(tr)
        st.reloading = still

    def record_funnel(self, tr: Tracked) -> None:
        """Place a request in the funnel once, when its hit is known to be used or not."""
        if not tr.funnel_done:
            tr.funnel_done = True
            tr.hit_tokens = tr.facts.s_runtime
            self.st.funnel.record(tr.facts)


def _or_now(time_s: float | None, now: float) -> float:
    return now if time_s is None else time_s


def _replace(facts, **changes):
    import dataclasses

    return dataclasses.replace(facts, **changes)

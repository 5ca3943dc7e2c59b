"""The host tier: offloaded turns and their reloads ("offload", seed 003 §6).

A finished turn's K/V is copied to host memory (real bytes with a real KV pool; modeled
bytes = tokens x m_token otherwise), then published unlocked like "drop". Device pages of
an offloaded turn are not freed eagerly: like SGLang's HiCache write-back, the device copy
stays evictable and is reclaimed by the tree's own policy under pressure. On the next
turn, whatever the tree evicted meanwhile is reloaded from the host instead of recomputed
when the reload beats recompute (seed 003 break-even: reload S*m/B vs recompute 2PS/R);
the request cannot run until the reload is resident (mapping lag, seed 000 0x06).

The next turn's prompt, page size P:

    0            prefix_len                     end                       S
    |------------|------------------------------|-------------------------|
     device hit   host tier supplies (reload)    computed by the prefill
                 ^ page aligned (SGLang's match) ^ floor(min(host length, s_cap) / P) * P
                                                   (s_cap = S - 1: the last token is
                                                   always computed, for its logits)

The reload span's slots are the request's part of the step's allocation:

    out_cache_loc: | ... earlier members ... | this request: n = end - prefix_len | ...
                                             ^ offset = sum(extend_lens[:index])
    host rows [prefix_len, prefix_len + n)  ->  slots out_cache_loc[offset : offset + n]
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine_adapter.embedded.requests import RequestState, Tracked
from engine_adapter.embedded.state import EngineState


@dataclass(kw_only=True)
class HostEntry:
    """One session's offloaded context, [0, length) of its last turn, under its key."""

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


class HostTier:
    """Host-memory copies of offloaded turns, oldest first, within
    `EngineConfig.host_capacity_tokens` (the oldest entry goes first when over).

    `offload` reads SGLang's pool and `req_to_token` (never changes them); `start_reload`
    writes the host rows into the slots just allocated and queues the request in
    `st.reloading`; `complete_reloads` moves settled reloads to `partial` (or, when a
    generation bump made them stale, frees them and requeues them in `waiting`). All
    three count bytes and tokens and record receipts. Raises nothing of its own."""

    def __init__(self, st: EngineState) -> None:
        self.st = st
        self.entries: OrderedDict[str, HostEntry] = OrderedDict()

    @property
    def tokens(self) -> int:
        """Tokens held on the host, all sessions together."""
        return sum(e.length for e in self.entries.values())

    # ---- turn end ----------------------------------------------------------------------

    def offload(self, tr: Tracked) -> None:
        """Copy a finishing request's committed K/V [0, kv_committed_len) to the host,
        before its row is released."""
        import torch

        st, req = self.st, tr.req
        req.refresh_fill_ids()  # the fill array lags output_ids until refreshed
        length = req.kv.kv_committed_len
        slots = st.sg.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :length].to(dtype=torch.int64)
        layers_k = layers_v = None
        if st.config.kv_pool == "mha":  # real bytes: SGLang's pool buffers, per layer
            pool = st.sg.kv_pool
            # the host tier is host memory whatever the pool's device (indexing copies)
            layers_k = [pool.get_key_buffer(i)[slots].cpu() for i in range(pool.layer_num)]
            layers_v = [pool.get_value_buffer(i)[slots].cpu() for i in range(pool.layer_num)]
        tokens = np.frombuffer(req.full_untruncated_fill_ids, dtype=np.int64, count=length).copy()
        self.entries[tr.spec.session] = HostEntry(
            session=tr.spec.session, key=tr.key, tokens=tokens, length=length,
            layers_k=layers_k, layers_v=layers_v, stored_s=st.clock_s,
        )
        self.entries.move_to_end(tr.spec.session)
        nbytes = st.cost.kv_bytes(length)
        st.counters.offloaded_tokens += length
        st.counters.offload_bytes += nbytes
        end = st.clock_s + st.cost.transfer_seconds(length)
        st.receipt(kind="offload", start_s=st.clock_s, end_s=end, tokens=length, nbytes=nbytes,
                   namespace=tr.namespace_label, request=req.rid)
        self._enforce_capacity()

    def _enforce_capacity(self) -> None:
        cap = self.st.config.host_capacity_tokens
        while cap is not None and self.entries and self.tokens > cap:
            self.entries.popitem(last=False)

    def discard(self, session: str) -> None:
        """The session's next turn runs without its host copy (admitted, not reloading)."""
        self.entries.pop(session, None)

    # ---- next turn ---------------------------------------------------------------------

    def plan(self, tr: Tracked, s_cap: int) -> HostPlan | None:
        """How much of this request's prefix the host tier can supply beyond the device
        hit (diagram), and whether reloading it beats recomputing it; None when nothing."""
        st, req = self.st, tr.req
        entry = self.entries.get(tr.spec.session) if tr.spec.session else None
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

    def start_reload(self, tr: Tracked, batch: Any, index: int) -> None:
        """Slots for [prefix, end) were just allocated (member `index` of `batch`, a
        PrefillPlan or ScheduleBatch): fill them from the host tier (diagram)."""
        import torch

        st, req = self.st, tr.req
        entry = self.entries.pop(tr.spec.session)
        offset = sum(batch.extend_lens[:index])
        n = tr.reload_tokens
        slots = batch.out_cache_loc[offset : offset + n].to(dtype=torch.int64)
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
                tr.facts = dataclasses.replace(tr.facts, snapshot_current=False, s_runtime=0)
                release_kv_cache(req, st.sg.tree_cache, checkpoint=False)
                req.reset_for_retract()
                tr.state = RequestState.WAITING
                tr.record_funnel(st.funnel)
                st.waiting.appendleft(tr)
                continue
            checkpoint_kv_cache(req, st.sg.tree_cache)
            tr.facts = dataclasses.replace(tr.facts, s_runtime=tr.reload_required_end)
            tr.record_funnel(st.funnel)
            tr.state = RequestState.PREFILL
            st.partial.append(tr)
        st.reloading = still

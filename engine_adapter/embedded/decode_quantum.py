"""Decode in quanta of q tokens per request per step (replays of long traces).

SGLang's decode path allocates one slot per request per step (`prepare_for_decode`); a
one-hour production trace has millions of output tokens, so replaying it token by token
costs millions of steps. With `EngineConfig(decode_quantum=q)`, q > 1, each step extends
every running request by up to q tokens through SGLang's own extend allocation
(`ScheduleBatch.prepare_for_extend` on requests that hold their rows, the path SGLang uses
for chunk continuations): the same pages are allocated, in the same order of requests,
only q steps at a time. Memory pressure is checked before allocating, as SGLang's
`check_decode_mem` does, and requests are retracted in SGLang's own retraction order
(`ScheduleBatch._get_decode_retraction_order`).

    before:  origin | o_1 ... o_k            KV committed for all but o_k
    quantum: append o_{k+1} .. o_{k+q-1}, extend [committed, committed + q), append o_{k+q}
    after:   KV committed for all but o_{k+q}                      (= q decode steps)

Modeled time is charged as q decode iterations; each token's ITL is the step time / q.
"""

from __future__ import annotations

from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
from engine_adapter.embedded.state import EngineState
from engine_adapter.base.pages import page_ceil


class QuantumDecode:
    def __init__(self, st: EngineState, retention, quantum: int, cache=None) -> None:
        self.st = st
        self.retention = retention
        self.quantum = quantum
        self.cache = cache  # DirectCache, or None: allocate through a ScheduleBatch
        self._batch = None
        self._members: list = []

    def _sizes(self) -> dict[str, int]:
        out = {}
        for rid, tr in self.st.running.items():
            req = tr.req
            out[rid] = max(1, min(self.quantum, req.sampling_params.max_new_tokens - len(req.output_ids)))
        return out

    def _need_tokens(self, sizes: dict[str, int]) -> int:
        page = self.st.config.page_size
        need = 0
        for rid, q in sizes.items():
            kv = self.st.running[rid].req.kv
            have = page_ceil(kv.kv_allocated_len, page)
            need += max(0, page_ceil(kv.kv_committed_len + q, page) - have)
        return need

    def prepare(self) -> tuple[int, int]:
        """Retract under pressure, then allocate this quantum's slots. Returns
        (decoding requests, context tokens they read) for the cost model."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        st = self.st
        self._batch, self._members = None, []
        if not st.running:
            return 0, 0
        sizes = self._sizes()
        allocator, tree = st.sg.allocator, st.sg.tree_cache
        need = self._need_tokens(sizes)

        def fits() -> bool:
            allocator.evict_to_free_tokens(tree, need)
            return allocator.available_size() >= need

        if not self.retention.make_room(fits):
            trackeds = list(st.running.values())
            order = ScheduleBatch._get_decode_retraction_order([t.req for t in trackeds])
            while order and allocator.available_size() < need:
                victim = trackeds[order.pop()]
                st.running.pop(victim.req.rid)
                if order:
                    self.retention.retract(victim)
                else:  # as SGLang does: not even one request fits, end it as it stands
                    self.retention.abort(victim)
                sizes = self._sizes()
                need = self._need_tokens(sizes)
                allocator.evict_to_free_tokens(tree, need)
            if not st.running:
                return 0, 0
        members = list(st.running.values())
        for tr in members:
            req = tr.req
            for _ in range(sizes[req.rid] - 1):
                req.output_ids.append(st.next_output_token())
            req.refresh_fill_ids()
            req.prefix_len = req.kv.kv_committed_len
            req.extend_end = req.prefix_len + sizes[req.rid]
        if self.cache is not None:  # the same alloc_for_extend calls, no batch tensors
            self.cache.extend([t.req for t in members])
            batch = True
        else:
            batch = ScheduleBatch.init_new(
                [t.req for t in members], st.sg.req_to_token_pool, allocator, tree,
                st.sg.model_config, False, SpeculativeAlgorithm.NONE,
            )
            with stdout_to_stderr():
                batch.prepare_for_extend()
        self._batch, self._members = batch, members
        return len(members), sum(t.req.kv.kv_committed_len for t in members)

    def complete(self, model_tokens=None) -> None:
        """Append each quantum's last token; finish requests that are done."""
        st = self.st
        if self._batch is None:
            return
        for tr in self._members:
            req = tr.req
            q = req.extend_len
            req.output_ids.append(st.next_output_token())
            spacing = (st.clock_s - tr.last_token_s) / q
            tr.itl.extend([spacing] * q)
            tr.last_token_s = st.clock_s
            req.update_finish_state()
            if req.finished():
                self.retention.finish(tr)
        self._batch, self._members = None, []

    @property
    def iterations(self) -> int:
        """Decode iterations this step stands for (for the cost model)."""
        return self.quantum

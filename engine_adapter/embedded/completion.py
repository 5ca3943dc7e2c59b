"""Prefill completion: what happens to each planned request after the modeled forward.

    reloading            its slots were allocated for the host tier's span: start the
                         (modeled) transfer; it runs once the reload is resident
    prompt not done      publish the chunk with SGLang's `checkpoint_kv_cache` (as SGLang
                         does for chunked requests) and requeue it as a continuation
    prompt done          its first output token (the tiny model's, else synthetic); then it
                         finishes (one output token asked) or joins the decode set

The content oracle records every prefilled prefix here, so the funnel can later tell a
miss that SGLang's tree could have served from one no cache could have.
"""

from __future__ import annotations

from engine_adapter.embedded.allocation import PrefillPlan
from engine_adapter.embedded.requests import RequestState
from engine_adapter.embedded.state import EngineState


class Completion:
    """Settles an allocated `PrefillPlan`.

    `complete` mutates each member's `Req` (output ids, finish state, publication in the
    tree) and `Tracked` (state, token times), the queues (`partial`, `running`,
    `reloading` through retention), the content oracle and the funnel, and on the
    exact-batches path merges the surviving batch into `st.running_batch`. Finished
    requests go to `retention.finish`. It raises nothing of its own."""

    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention

    def complete(self, plan: PrefillPlan, tokens: dict[str, int] | None = None) -> None:
        """Post-forward: publish chunks, emit first tokens (the model's, when one ran;
        else synthetic), start reloads. A plan whose allocation failed is a no-op."""
        if not plan.allocated:
            return
        st = self.st
        keep: list[int] = []
        last_tokens: list[int] = []
        for index, tr in enumerate(plan.members):
            req = tr.req
            if tr.state == RequestState.RELOADING:
                self.retention.start_reload(tr, plan, index)
                last_tokens.append(0)
                continue
            tr.record_funnel(st.funnel)
            # [0, prefix_len) was matched or computed under this key before: record the rest.
            st.oracle.record(tr.key, req.full_untruncated_fill_ids, req.extend_end,
                             known=req.prefix_len, chain=tr.chain)
            if req.extend_end < len(req.full_untruncated_fill_ids):
                from sglang.srt.mem_cache.common import checkpoint_kv_cache

                checkpoint_kv_cache(req, st.sg.tree_cache)
                tr.state = RequestState.PREFILL
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
                tr.state = RequestState.RUNNING
                st.join_running(tr)
                keep.append(index)
        if plan.batch is None:
            return  # the direct path reads the decode set from st.running
        self._merge_decode_batch(plan.batch, last_tokens, keep)

    def _merge_decode_batch(self, batch, last_tokens: list[int], keep: list[int]) -> None:
        """Exact batches: the plan's batch, filtered to the requests that decode next, joins
        the running batch (SGLang's `filter_batch` + `merge_batch`)."""
        import torch

        st = self.st
        batch.output_ids = torch.tensor(last_tokens, dtype=torch.int64, device=batch.device)
        batch.filter_batch(keep_indices=keep)
        if batch.reqs:
            if st.running_batch is None or st.running_batch.is_empty():
                st.running_batch = batch
            else:
                st.running_batch.merge_batch(batch)

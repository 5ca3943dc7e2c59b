"""One decode step for the running batch, through SGLang's own decode path.

Before allocating, SGLang's `ScheduleBatch.check_decode_mem()` asks the allocator (which
evicts reclaimable cache first) whether one more token per request fits; if not,
`retract_decode()` preempts requests in SGLang's retraction order, releasing their rows
without publishing them (they are re-queued and recomputed, "retraction"). Then
`prepare_for_decode()` allocates one slot per request.
"""

from __future__ import annotations

from engine_adapter.embedded.requests import RequestState
from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
from engine_adapter.embedded.state import EngineState


class Decode:
    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention

    def prepare(self) -> tuple[int, int]:
        """Retract if needed and allocate this step's decode slots.

        Returns (decoding requests, context tokens they read) for the cost model.
        """
        st = self.st
        batch = st.running_batch
        if batch is None or batch.is_empty():
            return 0, 0
        with stdout_to_stderr():
            return self._prepare(batch)

    def _prepare(self, batch) -> tuple[int, int]:
        st = self.st
        if not self.retention.make_room(batch.check_decode_mem):
            retracted, _ratio, aborted = batch.retract_decode()
            settle_retraction(st, self.retention, retracted, aborted)
            if batch.is_empty():
                st.running_batch = None
                return 0, 0
        batch.prepare_for_decode()
        return len(batch.reqs), int(batch.seq_lens_cpu.sum())

    iterations = 1  # one decode iteration per step

    def complete(self, model_tokens: list[int] | None = None) -> None:
        """Append one output token per request (the model's, when one ran); finish those
        that are done."""
        import torch

        st = self.st
        batch = st.running_batch
        if batch is None or batch.is_empty():
            return
        tokens = []
        for index, req in enumerate(batch.reqs):
            token = model_tokens[index] if model_tokens is not None else st.next_output_token()
            req.output_ids.append(token)
            tokens.append(token)
            tr = st.running[req.rid]
            tr.itl.append(st.clock_s - tr.last_token_s)
            tr.last_token_s = st.clock_s
            req.update_finish_state()
        batch.output_ids = torch.tensor(tokens, dtype=torch.int64, device=batch.device)
        for req in [r for r in batch.reqs if r.finished()]:
            self.retention.finish(st.running[req.rid])
        batch.filter_batch()
        if batch.is_empty():
            st.running_batch = None


def settle_retraction(st, retention, retracted, aborted) -> None:
    """After SGLang's retraction (`retract_decode`, or cache_ops' replay of it): retracted
    requests go to the back of the waiting queue, in retraction order (they recompute;
    scheduler.py update_running_batch -> _add_request_to_queue appends them);
    aborted ones, released by SGLang because not even one fits, are finished. Shared by the
    ScheduleBatch decode and the direct decode (decode_direct.py)."""
    for req in retracted:
        tr = st.running[req.rid]
        st.leave_running(tr)
        tr.state = RequestState.WAITING
        st.counters.retractions += 1
        st.counters.retracted_tokens += req.seqlen
        st.receipt(kind="retraction", start_s=st.clock_s, end_s=st.clock_s, tokens=req.seqlen,
                   namespace=tr.namespace_label, request=req.rid)
        st.waiting.append(tr)
    for req in aborted:  # SGLang released it: not even one request fits; end it
        tr = st.running.get(req.rid)
        if tr is not None:
            st.counters.allocation_failures += 1
            retention.finish(tr, released=True)

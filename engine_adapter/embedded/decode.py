"""Decode for the running batch, through SGLang's decode path: the one decode class.

One step is SGLang's `Scheduler.update_running_batch` and `process_batch_result_decode`
(srt/managers/scheduler.py), on a decode cache (decode_cache.py: the running
`ScheduleBatch`, or the direct path making the same calls):

    prepare    memory held on the side yields first (retention.make_room); then
               check_decode_mem and, when even that is short, retract_decode: the victims
               go back to the waiting queue, the new_token_ratio becomes SGLang's estimate
               over the kept requests (else it decays: admission.py `before_decode`); then
               prepare_for_decode (one slot per request)
    complete   one output token per request (the model's, when one ran), the step's clock
               in the decode log (inter-token latencies, decode_log.py), SGLang's
               update_finish_state for the requests at their length budget, filter_batch

A decode jump (jumps.py, the direct cache only) is k such steps at once: `prepare_jump`
decays the ratio k times and allocates them in one call, `complete` takes their k clocks.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from engine_adapter.embedded.decode_cache import DecodeCache
from engine_adapter.embedded.decode_log import DecodeLog
from engine_adapter.embedded.requests import RequestState
from engine_adapter.embedded.state import EngineState


class DecodeStep(NamedTuple):
    """What `prepare` left to run: `requests` decode (0: none, the batch emptied), reading
    `context` tokens; `retract_ratio`: the new_token_ratio SGLang sets after a retraction
    in this step (retract_decode's estimate over the kept requests), else None."""

    requests: int
    context: int
    retract_ratio: float | None


class Decode:
    """Mutates the running requests' `Req`s, SGLang's allocator and tree (through the decode
    cache: evictions, retraction releases, finish inserts), the decode log, and the
    engine's queues and counters (retractions, finishes through `retention.finish`).
    Raises IntegrityError when SGLang does not finish a request at its length budget."""

    def __init__(self, st: EngineState, retention, cache: DecodeCache, admission) -> None:
        self.st = st
        self.retention = retention
        self.cache = cache
        self.admission = admission  # its new_token_ratio and batch_is_full (admission.py)
        self.log = st.decode_log = DecodeLog()

    def prepare(self) -> DecodeStep:
        """Retract if needed and allocate this step's decode slots (module docstring)."""
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
            NewTokenRatioTracker,
        )

        st = self.st
        if not st.running:
            return DecodeStep(0, 0, None)
        counters = st.counters
        shrinks = (counters.retractions, counters.allocation_failures)
        if not self.retention.make_room(self.cache.fits):
            retracted, aborted, kept = self.cache.retract()
            settle_retraction(st, self.retention, retracted, aborted)
            st.reorder_running([r.rid for r in kept])  # filter_batch keeps retraction order
        ratio = None
        if (counters.retractions, counters.allocation_failures) != shrinks:
            ratio = NewTokenRatioTracker.estimate_new_token_ratio_after_retract(
                [t.req for t in st.running.values()])
        self.admission.before_decode(1, ratio)
        if not st.running:
            return DecodeStep(0, 0, ratio)
        requests, context = self.cache.allocate()
        return DecodeStep(requests, context, ratio)

    def prepare_jump(self, steps: int) -> int:
        """Allocate `steps` decode steps at once (a span jumps.py qualified); returns the
        batch size. The direct decode cache only."""
        self.admission.before_decode(steps, None)
        return self.cache.allocate_many(steps)

    def complete(self, clocks: Sequence[float], model_tokens: list[int] | None = None) -> None:
        """After the forward of len(clocks) steps ending at those clocks: one output token
        per request and step (the model's, when one ran; else synthetic ids drawn in batch
        order, step-major), the clocks logged, and the requests whose length budget a step
        reached finished (decode_log.py), in batch order."""
        st = self.st
        running = st.running
        steps = len(clocks)
        if model_tokens is None:
            count = len(running) * steps
            base = st.take_output_tokens(count)
            model_tokens = range(base, base + count)
        self.cache.append(model_tokens, steps)
        log = self.log
        first = log.step
        log.clocks.extend(clocks)
        due = []
        for step in range(first, first + steps):  # in a jump only the last step can finish
            due += log.due(step, running)
        self._finish(due)
        self.cache.drop_finished()

    def _finish(self, due: list) -> None:
        """SGLang's `update_finish_state` for the requests at their length budget; each
        must finish (see decode_log.py for why no other request can)."""
        from engine_adapter.base.errors import IntegrityError

        for tr in due:
            req = tr.req
            req.update_finish_state()
            if not req.finished():
                raise IntegrityError(f"request {req.rid} reached max_new_tokens but SGLang "
                                     "did not finish it")
        for tr in due:
            self.retention.finish(tr)


def settle_retraction(st, retention, retracted, aborted) -> None:
    """After SGLang's retraction (`retract_decode`, or cache_ops' replay of it): retracted
    requests go to the back of the waiting queue, in retraction order (they recompute;
    scheduler.py update_running_batch -> _add_request_to_queue appends them);
    aborted ones, released by SGLang because not even one fits, are finished."""
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

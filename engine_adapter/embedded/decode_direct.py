"""Decode on the direct cache path: SGLang's decode-step cache calls, event-driven.

One step (`prepare` + `complete`) makes the calls `Decode` makes through the running
`ScheduleBatch` (check_decode_mem, retract_decode, prepare_for_decode), through
`DirectCache`, on the running requests in batch order (`EngineState.running` keeps the
batch's order: admissions append, retractions and finishes remove).

`jump_steps` + `advance` replay several decode steps in one call when nothing can change
in between. A span of k steps qualifies when, for every step j in it:

    - no prefill round would run (nothing waits, or SGLang's batch_is_full holds, and no
      chunk is in progress: admission.py `prefill_wanted`), no reload is pending, and the
      next arrival or driver event lies after the clock at the start of step j;
    - no request finishes before step k (k <= the fewest tokens any request still needs);
    - the pool stays at or above the per-step eviction trigger, bs x page tokens
      (`alloc_paged_token_slots_decode` evicts when available < bs x page):

          available - page x (pages taken by steps 1..j-1)  >=  bs x page

    so the single-step path would call no tree method and retract nothing in the span.
Then the k steps' slots come from one `alloc_extend` call (the same number of pages, taken
from the head of the free list; only which request gets which page id differs), the
clock advances by the same k step costs in the same order, and output ids are drawn in
the same step-major order, so every later tree call sees the same keys.
"""

from __future__ import annotations

import numpy as np

from engine_adapter.embedded.batch_view import BatchView
from engine_adapter.embedded.cache_ops import DirectCache
from engine_adapter.embedded.decode import settle_retraction
from engine_adapter.embedded.decode_log import DecodeLog
from engine_adapter.embedded.state import EngineState

MAX_JUMP_STEPS = 1024  # bounds the page-count table one plan builds (steps x requests)


class DirectDecode:
    """Mutates the running requests' `Req`s, the allocator, the tree (evictions,
    retraction releases, finish inserts) and the engine's queues and counters."""

    iterations = 1  # one decode iteration per step

    def __init__(self, st: EngineState, retention, cache: DirectCache) -> None:
        self.st = st
        self.retention = retention
        self.cache = cache
        self.log = st.decode_log = DecodeLog()
        self.view = st.batch_view = BatchView()

    def batch(self) -> BatchView:
        """The running `Req`s in batch order, with their kv records, output appenders,
        `req_to_token` rows and committed lengths (batch_view.py: applied from the batch's
        changes, not rebuilt); the decode calls keep `committed` in step with each `Req`'s
        `kv_committed_len`."""
        view = self.view
        view.refresh(self.st.running)
        return view

    def prepare(self) -> tuple[int, int]:
        """Retract if needed and allocate this step's decode slots.
        Returns (decoding requests, context tokens they read) for the cost model."""
        st = self.st
        if not st.running:
            return 0, 0
        reqs = self.batch().reqs
        fits = lambda: self.cache.decode_fits(reqs, self.batch().committed)  # noqa: E731
        if not self.retention.make_room(fits):
            retracted, aborted, kept = self.cache.retract(self.batch().reqs)
            settle_retraction(st, self.retention, retracted, aborted)
            st.reorder_running([r.rid for r in kept])  # the batch's new order
            if not st.running:
                return 0, 0
        view = self.batch()
        self.cache.decode(view.kvs, view.rows, view.committed)
        return len(view.reqs), int(view.committed.sum())

    def complete(self, model_tokens: list[int] | None = None) -> None:
        """Append one output token per request (the model's, when one ran; else synthetic
        ids drawn in batch order) and log the step's clock; finish those whose length
        budget this step reached (decode_log.py), in batch order."""
        st = self.st
        running = st.running
        appends = self.batch().appends
        if model_tokens is None:
            base = st.take_output_tokens(len(appends))
            model_tokens = range(base, base + len(appends))
        for append, token in zip(appends, model_tokens):
            append(token)
        log = self.log
        step = log.step
        log.clocks.append(st.clock_s)
        self._finish(log.due(step, running))

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

    # ---- event-driven jumps --------------------------------------------------------------

    def jump_steps(self, next_event_s: float | None) -> list[float]:
        """Clock values at the end of each step of the longest qualifying span starting
        now (see module docstring); fewer than 2 means: take a single step."""
        st = self.st
        committed = self.batch().committed
        bs = len(committed)
        page = self.cache.page
        finish = self.log.next_finish(st.running)
        limit = MAX_JUMP_STEPS if finish is None else min(MAX_JUMP_STEPS, finish - self.log.step + 1)
        if limit < 2:
            return []
        taken = self.cache.jump_pages(committed, limit)
        free = st.sg.allocator.available_size()
        context = int(committed.sum())
        clocks: list[float] = []
        clock = st.clock_s
        for j in range(limit):
            if j and next_event_s is not None and clock >= next_event_s:
                break  # the event is due at the start of step j + 1: stop before it
            if free - page * int(taken[j]) < bs * page:
                break  # step j + 1 would evict (or retract): the single-step path runs it
            context += bs
            clock += st.cost.step_seconds(0, bs, context)
            clocks.append(clock)
        return clocks

    def advance(self, clocks: list[float]) -> int:
        """Run len(clocks) decode steps at once (a span `jump_steps` returned). Returns
        the decode batch size."""
        st = self.st
        running = st.running
        bs, steps = len(running), len(clocks)
        view = self.batch()
        self.cache.decode_many(view.kvs, view.rows, view.committed, steps)
        base = st.take_output_tokens(bs * steps)
        st.clock_s = clocks[-1]
        for index, req in enumerate(view.reqs):
            req.output_ids.extend(range(base + index, base + bs * steps, bs))
        log = self.log
        first = log.step
        log.clocks.extend(clocks)
        due = []
        for step in range(first, first + steps):  # only the last step can hold finishes
            due += log.due(step, running)
        self._finish(due)
        return bs

"""Decode on the direct cache path: SGLang's decode-step cache calls, event-driven.

One step (`prepare` + `complete`) makes the calls `Decode` makes through the running
`ScheduleBatch` (check_decode_mem, retract_decode, prepare_for_decode), through
`DirectCache`, on the running requests in batch order (`EngineState.running` keeps the
batch's order: admissions append, retractions and finishes remove).

`jump_steps` + `advance` replay several decode steps in one call when nothing can change
in between. A span of k steps qualifies when, for every step j in it:

    - no prefill work, reload or arrival is pending (nothing waits, the next arrival or
      driver event lies after the clock at the start of step j);
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
        self.jump_available: list[int] = []
        self.log = st.decode_log = DecodeLog()
        self._view: tuple | None = None  # (running version, reqs, rows, committed)

    def batch(self) -> tuple[list, np.ndarray, np.ndarray]:
        """The running `Req`s in batch order with their `req_to_token` rows and committed
        lengths as arrays, rebuilt only when the batch changed (`running_version`); the
        decode calls keep `committed` in step with each `Req`'s `kv_committed_len`."""
        st = self.st
        if self._view is None or self._view[0] != st.running_version:
            reqs = [t.req for t in st.running.values()]
            rows = np.fromiter((r.kv.req_pool_idx for r in reqs), dtype=np.int64, count=len(reqs))
            committed = np.fromiter((r.kv.kv_committed_len for r in reqs), dtype=np.int64,
                                    count=len(reqs))
            self._view = (st.running_version, reqs, rows, committed)
        return self._view[1], self._view[2], self._view[3]

    def prepare(self) -> tuple[int, int]:
        """Retract if needed and allocate this step's decode slots.
        Returns (decoding requests, context tokens they read) for the cost model."""
        st = self.st
        if not st.running:
            return 0, 0
        reqs = self.batch()[0]
        if not self.retention.make_room(lambda: self.cache.decode_fits(reqs, self.batch()[2])):
            retracted, aborted, kept = self.cache.retract(self.batch()[0])
            settle_retraction(st, self.retention, retracted, aborted)
            st.reorder_running([r.rid for r in kept])  # the batch's new order
            if not st.running:
                return 0, 0
        reqs, rows, committed = self.batch()
        self.cache.decode(reqs, rows, committed)
        return len(reqs), int(committed.sum())

    def complete(self, model_tokens: list[int] | None = None) -> None:
        """Append one output token per request (the model's, when one ran; else synthetic
        ids drawn in batch order) and log the step's clock; finish those whose length
        budget this step reached (decode_log.py), in batch order."""
        st = self.st
        running = st.running
        if model_tokens is None:
            base = st.take_output_tokens(len(running))
            for index, tr in enumerate(running.values()):
                tr.req.output_ids.append(base + index)
        else:
            for token, tr in zip(model_tokens, running.values()):
                tr.req.output_ids.append(token)
        log = self.log
        step = log.step
        log.clocks.append(st.clock_s)
        self._finish(log.due(step, running))

    def _finish(self, due: list) -> None:
        """SGLang's `update_finish_state` for the requests at their length budget; each
        must finish (see decode_log.py for why no other request can)."""
        from kvctl.errors import IntegrityError

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
        reqs, _, committed = self.batch()
        bs = len(reqs)
        page = self.cache.page
        finish = self.log.next_finish(st.running)
        limit = MAX_JUMP_STEPS if finish is None else min(MAX_JUMP_STEPS, finish - self.log.step + 1)
        if limit < 2:
            return []
        taken = self.cache.jump_pages(committed, limit)
        free = st.sg.allocator.available_size()
        context = int(committed.sum())
        clocks: list[float] = []
        self.jump_available = []  # free tokens at the start of each step of the span
        clock = st.clock_s
        for j in range(limit):
            if j and next_event_s is not None and clock >= next_event_s:
                break  # the event is due at the start of step j + 1: stop before it
            if free - page * int(taken[j]) < bs * page:
                break  # step j + 1 would evict (or retract): the single-step path runs it
            context += bs
            clock += st.cost.step_seconds(0, bs, context)
            clocks.append(clock)
            self.jump_available.append(free - page * int(taken[j]))
        return clocks

    def advance(self, clocks: list[float]) -> int:
        """Run len(clocks) decode steps at once (a span `jump_steps` returned). Returns
        the decode batch size."""
        st = self.st
        running = st.running
        bs, steps = len(running), len(clocks)
        self.cache.decode_many(*self.batch(), steps)
        base = st.take_output_tokens(bs * steps)
        st.clock_s = clocks[-1]
        for index, tr in enumerate(running.values()):
            tr.req.output_ids.extend(range(base + index, base + bs * steps, bs))
        log = self.log
        first = log.step
        log.clocks.extend(clocks)
        due = []
        for step in range(first, first + steps):  # only the last step can hold finishes
            due += log.due(step, running)
        self._finish(due)
        return bs

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

from engine_adapter.embedded.cache_ops import DirectCache
from engine_adapter.embedded.decode import settle_retraction
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

    def prepare(self) -> tuple[int, int]:
        """Retract if needed and allocate this step's decode slots.
        Returns (decoding requests, context tokens they read) for the cost model."""
        st = self.st
        if not st.running:
            return 0, 0
        reqs = [t.req for t in st.running.values()]
        if not self.retention.make_room(lambda: self.cache.decode_fits(reqs)):
            retracted, aborted, kept = self.cache.retract(reqs)
            settle_retraction(st, self.retention, retracted, aborted)
            st.running = {r.rid: st.running[r.rid] for r in kept}  # the batch's new order
            if not st.running:
                return 0, 0
            reqs = kept
        self.cache.decode(reqs)
        return len(reqs), sum(r.kv.kv_committed_len for r in reqs)

    def complete(self, model_tokens: list[int] | None = None) -> None:
        """Append one output token per request (the model's, when one ran); finish those
        that are done, in batch order."""
        st = self.st
        done = []
        for index, tr in enumerate(list(st.running.values())):
            req = tr.req
            token = model_tokens[index] if model_tokens is not None else st.next_output_token()
            req.output_ids.append(token)
            tr.itl.append(st.clock_s - tr.last_token_s)
            tr.last_token_s = st.clock_s
            req.update_finish_state()
            if req.finished():
                done.append(tr)
        for tr in done:
            self.retention.finish(tr)

    # ---- event-driven jumps --------------------------------------------------------------

    def jump_steps(self, next_event_s: float | None) -> list[float]:
        """Clock values at the end of each step of the longest qualifying span starting
        now (see module docstring); fewer than 2 means: take a single step."""
        st = self.st
        reqs = [t.req for t in st.running.values()]
        bs = len(reqs)
        page = self.cache.page
        limit = min(MAX_JUMP_STEPS,
                    min(r.sampling_params.max_new_tokens - len(r.output_ids) for r in reqs))
        if limit < 2:
            return []
        taken = self.cache.jump_pages(reqs, limit)
        free = st.sg.allocator.available_size()
        context = sum(r.kv.kv_committed_len for r in reqs)
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
        running = list(st.running.values())
        reqs = [t.req for t in running]
        bs, steps = len(reqs), len(clocks)
        self.cache.decode_many(reqs, steps)
        base = st.take_output_tokens(bs * steps)
        st.clock_s = clocks[-1]
        gaps = [b - a for a, b in zip(clocks, clocks[1:])]
        done = []
        for index, tr in enumerate(running):
            req = tr.req
            req.output_ids.extend(range(base + index, base + bs * steps, bs))
            tr.itl.append(clocks[0] - tr.last_token_s)
            tr.itl.extend(gaps)
            tr.last_token_s = clocks[-1]
            req.update_finish_state()
            if req.finished():
                done.append(tr)
        for tr in done:
            self.retention.finish(tr)
        return bs

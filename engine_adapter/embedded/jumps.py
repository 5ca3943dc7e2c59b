"""When the engine's step may run several decode steps at once (a decode jump).

A jump stands for k consecutive steps in which SGLang's loop would only decode. A span of
k steps qualifies when, for every step j in it:

    - no prefill round would run (nothing waits, or SGLang's batch_is_full holds, and no
      chunk is in progress: admission.py `prefill_wanted`), no reload is pending, and the
      next arrival or driver event lies after the clock at the start of step j;
    - no request finishes before step k (k <= the fewest tokens any request still needs);
    - the pool stays at or above the per-step eviction trigger, bs x page tokens
      (`alloc_paged_token_slots_decode` evicts when available < bs x page):

          available - page x (pages taken by steps 1..j-1)  >=  bs x page

    so the single-step path would call no tree method and retract nothing in the span.
Then the k steps' slots come from one `alloc_extend` call (the same number of pages, taken
from the head of the free list; only which request gets which page id differs:
decode_cache.py `DirectDecodeCache.allocate_many`), the clock advances by the same k step
costs in the same order, and output ids are drawn in the same step-major order, so every
later tree call sees the same keys. Only the direct decode cache jumps.

Two places in SGLang's order may start one (batches.py):

    before the prefill round   no round would run now either: the whole step is decode
    after a round that         the round admitted nothing (and undid nothing); its decode
    admitted nothing           step is the jump's first when no round would run in the steps
                               after it (the round left batch_is_full set, or nothing waits)
                               and the caller's `merge_check` accepts a merged report

The second one's first step is the step the single path would take now: the same calls
into SGLang's tree (none, by the span conditions) and the same new_token_ratio decay; no
request finishes in it, so its end state is the free pool less the pages it takes, the
tree unchanged. `StepReport.first` carries that state, so a caller integrating per-step
gauges (kvctl/replay/peaks.py) sees the step as if it had been reported alone.
"""

from __future__ import annotations

from engine_adapter.embedded.state import EngineState

MAX_JUMP_STEPS = 1024  # bounds one plan's span (and the page-count table it builds)


class JumpPlanner:
    """Reads the engine state; mutates nothing. `decode`: the engine's `Decode`, whose
    cache must be the direct one when `enabled`."""

    def __init__(self, st: EngineState, decode, admission, enabled: bool) -> None:
        self.st = st
        self.decode = decode
        self.admission = admission
        self.enabled = enabled and decode.cache.jumps

    def clocks(self, horizon_s: float | None) -> list[float]:
        """The clocks of a jump that may start now, or [] when a single step must run."""
        st = self.st
        if not (self.enabled and st.running and not st.reloading
                and not self.admission.prefill_wanted()):
            return []
        clocks = self._span(self.next_event_s(horizon_s))
        return clocks if len(clocks) > 1 else []

    def next_event_s(self, horizon_s: float | None) -> float | None:
        """The earliest time at which something other than decoding becomes due."""
        arrival = self.st.future[0][0] if self.st.future else None
        return min((t for t in (horizon_s, arrival) if t is not None), default=None)

    def _span(self, next_event_s: float | None) -> list[float]:
        """Clock values at the end of each step of the longest qualifying span starting
        now (module docstring); fewer than 2 means: take a single step."""
        st, cache, log = self.st, self.decode.cache, self.decode.log
        committed = cache.committed()
        bs = len(committed)
        page = cache.page
        finish = log.next_finish(st.running)
        limit = MAX_JUMP_STEPS if finish is None else min(MAX_JUMP_STEPS, finish - log.step + 1)
        if limit < 2:
            return []
        taken = cache.jump_pages(limit)
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

    def first_state(self, clocks: list[float]) -> tuple[float, int, int]:
        """(clock, free tokens, evictable tokens) at the end of a jump's first step."""
        sg, cache = self.st.sg, self.decode.cache
        pages = int(cache.jump_pages(2)[1])
        return (clocks[0], sg.allocator.available_size() - pages * cache.page,
                sg.tree_cache.evictable_size())

"""When the engine's step may run several decode steps at once (a decode jump).

A jump (decode_direct.py `jump_steps` / `advance`) stands for k consecutive steps in which
SGLang's loop would only decode: no prefill round runs (`_get_new_batch_prefill_raw`
returns at its first check: the batch is full, or nothing waits, and no chunk is in
progress), no reload is pending, no request finishes before the k-th step, the pool stays
above the per-step eviction trigger and no arrival or driver event falls inside. Two
places in `EmbeddedEngine.step` may start one:

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


class JumpPlanner:
    """Reads the engine state; mutates nothing."""

    def __init__(self, st: EngineState, decode, admission, enabled: bool) -> None:
        self.st = st
        self.decode = decode  # DirectDecode when enabled
        self.admission = admission
        self.enabled = enabled

    def clocks(self, horizon_s: float | None) -> list[float]:
        """The clocks of a jump that may start now, or [] when a single step must run."""
        st = self.st
        if not (self.enabled and st.running and not st.reloading
                and not self.admission.prefill_wanted()):
            return []
        clocks = self.decode.jump_steps(self.next_event_s(horizon_s))
        return clocks if len(clocks) > 1 else []

    def next_event_s(self, horizon_s: float | None) -> float | None:
        """The earliest time at which something other than decoding becomes due."""
        arrival = self.st.future[0][0] if self.st.future else None
        return min((t for t in (horizon_s, arrival) if t is not None), default=None)

    def first_state(self, clocks: list[float]) -> tuple[float, int, int]:
        """(clock, free tokens, evictable tokens) at the end of a jump's first step."""
        sg, decode = self.st.sg, self.decode
        pages = int(decode.cache.jump_pages(decode.batch().committed, 2)[1])
        return (clocks[0], sg.allocator.available_size() - pages * decode.cache.page,
                sg.tree_cache.evictable_size())

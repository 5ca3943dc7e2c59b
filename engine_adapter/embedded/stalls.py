"""Steps that run nothing: idle waits and stalls.

    idle     nothing queued, prefilling or decoding: the clock jumps to the next arrival
             or reload completion (`jump_to_next_event`), or a paced runner waits for it
             in wall time (`wait_until`, engine_adapter/live.py)
    stall    work is queued but the step ran nothing (no prefill allocated, no decode, the
             clock unmoved, nothing finished), `after_step` resolves it:

                 an admission rolled back       retried next step, up to 3 in a row
                 a reload in flight             wait for it (it will run)
                 a retention lease              revoke the oldest (a paused session yields)
                 partial prefills               preempt the newest (its chunks stay cached),
                                                when another partial or a waiting one follows
                 a later arrival                wait for it
                 none of these                  the workload cannot be served: IntegrityError
"""

from __future__ import annotations

from engine_adapter.base.errors import IntegrityError
from engine_adapter.embedded.state import EngineState

ROLLBACK_RETRIES = 3  # failed allocations retried in a row before the stall is resolved


class Stalls:
    """Mutates the clock (waits), leases and the partial queue (through `retention`), and
    its count of rollbacks in a row. Raises IntegrityError for an unservable workload or
    a wait that would go backwards or past the next event."""

    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention
        self.rollbacks_in_a_row = 0

    # ---- idle -------------------------------------------------------------------------------

    def next_event_s(self) -> float | None:
        """When the engine next has something to do: `clock_s` when work is runnable now
        (queued, prefilling or decoding requests), else the earliest pending arrival or
        reload completion; None when nothing is pending at all. Read-only."""
        st = self.st
        if st.waiting or st.partial or st.running:
            return st.clock_s
        events = [t.reload_ready_s for t in st.reloading]
        if st.future:
            events.append(st.future[0][0])
        return max(min(events), st.clock_s) if events else None

    def jump_to_next_event(self) -> bool:
        """Advance the idle clock to the next arrival or reload completion, and complete
        the reloads then due. False when no event is pending."""
        st = self.st
        events = [t.reload_ready_s for t in st.reloading]
        if st.future:
            events.append(st.future[0][0])
        later = [e for e in events if e > st.clock_s]
        if not later:
            if st.reloading:
                self.retention.complete_reloads()
                return True
            return False
        st.clock_s = min(later)
        self.retention.complete_reloads()
        return True

    def wait_until(self, to_s: float) -> None:
        """Advance an idle clock to `to_s` (not past the next event) without running
        anything: a paced runner waiting in wall time instead of jumping."""
        st = self.st
        event = self.next_event_s()
        if to_s < st.clock_s or (event is not None and (event <= st.clock_s or to_s > event)):
            raise IntegrityError(
                f"wait_until({to_s}): the clock is at {st.clock_s} and the next event at "
                f"{event} (an engine waits forward, idle, and never past its next event)")
        st.clock_s = to_s

    # ---- stalls -----------------------------------------------------------------------------

    def after_step(self, ran: bool, start_s: float) -> None:
        """After a step (counted in `counters.steps`) that ran a batch (`ran`: a prefill
        allocated, a decode batch or a jump) or not: resolve a stall (module docstring)."""
        st = self.st
        rolled_back = (st.last_rollback is not None
                       and st.last_rollback_step == st.counters.steps - 1)
        if not ran and st.clock_s == start_s and not st.finished:
            if rolled_back and self.rollbacks_in_a_row < ROLLBACK_RETRIES:
                self.rollbacks_in_a_row += 1  # a failed allocation: retry next step
            else:
                self._resolve()
        if not rolled_back:
            self.rollbacks_in_a_row = 0

    def _resolve(self) -> None:
        st = self.st
        if st.reloading:
            self.jump_to_next_event()
        elif self.retention.revoke_oldest_lease():
            return
        elif st.partial and (len(st.partial) > 1 or st.waiting):
            self.retention.retract(st.partial.pop())
        elif st.future and not st.partial:
            self.jump_to_next_event()
        else:
            waiting = st.waiting[0].spec.rid if st.waiting else "?"
            raise IntegrityError(
                f"scheduler stalled: request {waiting} cannot be admitted and nothing runs "
                f"({st.sg.allocator.available_size()} free, "
                f"{st.sg.tree_cache.evictable_size()} evictable, "
                f"{st.sg.tree_cache.protected_size()} protected tokens)")

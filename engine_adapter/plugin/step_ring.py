"""The step timer's numbered ring of raw step records, turned into `StepSample`s when read.

The scheduler thread writes one record per timed step into a preallocated slot, without a
lock (step_timer.py builds the record; `write` here is the reference of what it inlines)::

    slots[seq % capacity] = (seq, end_s, wall_s, run_s, raw shape ...)   then   next = seq + 1

An HTTP thread reads (`after`): `next`, then one copy of the slot list (a single C-level
list copy under the GIL), then each record it wants is checked to carry its own number: a
slot the writer reused meanwhile holds a newer number, and the numbers before it are
reported lost (`first` moves up), exactly as receipt_log.py's reader sees a gap. Shapes are
derived from the raw records only here (`derive`), off the scheduler thread.

    seq:   0 1 2 ... [first ............ next)        only the last `capacity` are kept
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine_adapter.step_samples import StepSample


class StepRing:
    def __init__(self, capacity: int, derive: Callable[[tuple], StepSample]) -> None:
        self.capacity = capacity
        self.slots: list[Any] = [None] * capacity
        self.next = 0  # the number the next record gets (written by the scheduler thread)
        self._derive = derive

    @property
    def next_seq(self) -> int:
        return self.next

    def write(self, record: tuple) -> None:
        """Append `record` (its first field must be `next`)."""
        seq = self.next
        self.slots[seq % self.capacity] = record
        self.next = seq + 1

    def after(self, seq: int) -> tuple[int, int, list[StepSample]]:
        """(first kept seq, next seq, samples numbered >= max(seq, first))."""
        next_seq = self.next
        slots = self.slots[:]  # atomic under the GIL
        first = max(0, next_seq - self.capacity)
        records = []
        for number in range(max(seq, first), next_seq):
            record = slots[number % self.capacity]
            if record is None or record[0] != number:  # reused since `next` was read
                first = number + 1
                records.clear()
                continue
            records.append(record)
        return first, next_seq, [self._derive(record) for record in records]

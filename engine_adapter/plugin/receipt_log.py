"""A bounded log of the receipts the plugin sees (engine_adapter/receipts.py), for /receipts.

The scheduler thread appends (one `match` receipt per admitted request, one `eviction`
receipt per eviction call that freed tokens); HTTP threads read. Each receipt gets a
sequence number; a reader asks for those after the last number it saw::

    seq:   0 1 2 ... [first ............ next)        only the last `capacity` are kept
                      ^ oldest kept       ^ the number the next receipt will get

A reader that fell more than `capacity` behind sees `first` > its position: the gap is the
number lost. Receipts carry request ids, counts and hashed namespace labels, never tokens.
The step timer (step_timer.py) keeps its `StepSample`s in one as well.
"""

from __future__ import annotations

import threading
from collections import deque

from engine_adapter.receipts import Receipt

CAPACITY = 4096


class ReceiptLog:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._items: deque[Receipt] = deque(maxlen=capacity)
        self._next = 0
        self._lock = threading.Lock()

    @property
    def next_seq(self) -> int:
        """The number the next appended item gets (read by the appending thread)."""
        return self._next

    def append(self, receipt: Receipt) -> None:
        with self._lock:
            self._items.append(receipt)
            self._next += 1

    def after(self, seq: int) -> tuple[int, int, list[Receipt]]:
        """(first kept seq, next seq, receipts numbered >= max(seq, first))."""
        with self._lock:
            items = list(self._items)
            next_seq = self._next
        first = next_seq - len(items)
        start = max(seq, first) - first
        return first, next_seq, items[start:]

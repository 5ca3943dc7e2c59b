"""Bounded histories of per-snapshot values for the sparklines (pure).

One point per snapshot sequence number: a poll that returns the same snapshot again adds
nothing, so the x axis is "reads that changed", not wall time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

HISTORY_POINTS = 240


class Series:
    """The last `capacity` values, one per distinct `seq`. Mutates only itself."""

    def __init__(self, capacity: int = HISTORY_POINTS) -> None:
        self._values: deque[float] = deque(maxlen=capacity)
        self._last_seq: int | None = None

    def push(self, seq: int, value: float) -> bool:
        """Append `value` for `seq`; False (and nothing appended) when seq was just seen."""
        if seq == self._last_seq:
            return False
        self._last_seq = seq
        self._values.append(value)
        return True

    def values(self) -> tuple[float, ...]:
        return tuple(self._values)

    def __len__(self) -> int:
        return len(self._values)


def windowed_rate(points: Iterable[tuple[int, int]], window: int) -> list[float]:
    """seed 003 eq. (2) over a sliding window of reads: H = d(sum S_match) / d(sum S_prompt).

    `points` are cumulative (prompt_tokens, hit_tokens) per read. Point i uses the change
    since read i - window (or since the first read). While no prompt tokens arrived in
    the window, the cumulative rate stands in (0.0 before any prompt at all).
    """
    points = list(points)
    rates: list[float] = []
    for index, (prompt, hits) in enumerate(points):
        base_prompt, base_hits = points[max(0, index - window)] if index else (0, 0)
        if prompt - base_prompt > 0:
            rates.append((hits - base_hits) / (prompt - base_prompt))
        else:
            rates.append(hits / prompt if prompt else 0.0)
    return rates

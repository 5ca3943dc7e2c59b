"""The pool partition as segments (pure): what the bar draws and the ledger lists.

seed 000 0x0CF: N_pool = N_free + N_evictable + N_protected + N_private (+ residual = leak).
A remote source cannot split `used` into protected and private, so it gets one "used"
segment instead of two guessed ones.
"""

from __future__ import annotations

from typing import NamedTuple

from engine_adapter.snapshot import PoolLedger

SEGMENT_STYLES = {
    "free": "green",
    "evictable": "cyan",
    "protected": "yellow",
    "private": "magenta",
    "used": "yellow",
    "residual": "bold red",
}


class Segment(NamedTuple):
    name: str
    tokens: int


def segments(ledger: PoolLedger) -> list[Segment]:
    """Free, evictable, protected, private (or used when unsplit), then a non-zero residual."""
    parts = [Segment("free", ledger.free_tokens), Segment("evictable", ledger.evictable_tokens)]
    if ledger.protected_tokens is None or ledger.private_tokens is None:
        parts.append(Segment("used", ledger.used_tokens))
    else:
        parts += [
            Segment("protected", ledger.protected_tokens),
            Segment("private", ledger.private_tokens),
        ]
    if ledger.residual_tokens > 0:
        parts.append(Segment("residual", ledger.residual_tokens))
    return parts


def cells(parts: list[Segment], width: int) -> list[int]:
    """Bar cells per segment, summing to `width` (largest remainder), every non-empty
    segment at least one cell when there is room, so a small leak stays visible."""
    total = sum(max(0, p.tokens) for p in parts)
    if total <= 0 or width <= 0:
        return [0] * len(parts)
    exact = [max(0, p.tokens) * width / total for p in parts]
    counts = [int(x) for x in exact]
    order = sorted(range(len(parts)), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in order[: width - sum(counts)]:
        counts[i] += 1
    for i, part in enumerate(parts):  # borrow from the widest segment for a tiny one
        if part.tokens > 0 and counts[i] == 0:
            widest = max(range(len(parts)), key=lambda j: counts[j])
            if counts[widest] > 1:
                counts[widest] -= 1
                counts[i] = 1
    return counts

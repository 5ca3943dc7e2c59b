"""Byte and count formatting. Bytes internally; binary prefixes for display (DESIGN.md).

Where a seed's worked example uses decimal GB, callers pass `decimal=True` so the number
reads as the seed wrote it.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
GB = 10**9

_BINARY = (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB))
_DECIMAL = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def fmt_bytes(n: float, *, decimal: bool = False, digits: int = 2) -> str:
    """Render a byte count with the largest prefix that keeps the value >= 1.

    >>> fmt_bytes(327_680)
    '320.00 KiB'
    >>> fmt_bytes(526e9, decimal=True, digits=1)
    '526.0 GB'
    """
    for suffix, size in _DECIMAL if decimal else _BINARY:
        if abs(n) >= size:
            return f"{n / size:.{digits}f} {suffix}"
    return f"{n:.0f} B"


def fmt_pct(fraction: float | None, digits: int = 1) -> str:
    """A fraction as a percentage; None (not observable / not applicable) as an em dash."""
    if fraction is None:
        return "—"
    return f"{100.0 * fraction:.{digits}f}%"

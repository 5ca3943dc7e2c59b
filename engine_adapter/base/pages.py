"""Ceiling division and page rounding: the one helper for every page count in kvctl.

Integers only (token, byte and row counts), never floats; numpy integer arrays work
elementwise (the extend kernel, alloc_kernel.py, uses them so). Page size P:

    tokens   0 ........ P-1 | P ....... 2P-1 | ... | (n-1)P ... S-1  [unused tail]
    pages  |<--- page 0 --->|<--- page 1 --->| ... |<------ page n-1 ------------->|

    ceil_div(S, P)   = n                  pages S tokens occupy
    page_ceil(S, P)  = n * P              tokens those pages hold (S rounded up)
    page_floor(S, P) = floor(S / P) * P   S rounded down to a page boundary

Pure and import-free, so `kvctl size` and the engine share it.
"""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for integers, b > 0, exactly (no float rounding for large a)."""
    return -(-a // b)


def page_ceil(tokens: int, page: int) -> int:
    """`tokens` rounded up to whole pages, in tokens."""
    return ceil_div(tokens, page) * page


def page_floor(tokens: int, page: int) -> int:
    """`tokens` rounded down to a page boundary, in tokens."""
    return tokens // page * page

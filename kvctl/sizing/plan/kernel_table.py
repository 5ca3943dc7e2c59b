"""Dense kernel block tables for a ragged batch, and their padding (seed 000 0x0AB).

A paged decode kernel reads a rectangular staging table: one row per request, n_max
columns, where row r uses only its first n_r = ceil(T_r / P_k) cells:

    lengths [64, 63, 17, 1], P_k = 16, n_max = 4
    r0 |##|##|##|##|     4 used
    r1 |##|##|##|##|     4 used
    r2 |##|##|..|..|     2 used, 2 pad
    r3 |##|..|..|..|     1 used, 3 pad
    table 16 cells, used 11, padding 5

One long row sets n_max for every short row; that is the scaling law the ledger shows.
The bytes per cell are a declared input (an int32 block id is 4 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvctl.sizing.plan._checks import positive, positive_ints
from kvctl.util.pages import ceil_div


@dataclass(frozen=True, kw_only=True)
class KernelTableRow:
    """Table cells for one kernel block size P_k."""

    kernel_block_size: int
    blocks_by_request: tuple[int, ...]  # n_r
    max_blocks: int  # n_max
    table_cells: int  # B * n_max
    used_cells: int  # sum n_r
    padding_cells: int  # B * n_max - sum n_r
    table_bytes: int
    padding_bytes: int


def kernel_tables(
    *, lengths: Sequence[int], kernel_block_sizes: Sequence[int], entry_bytes: int
) -> tuple[KernelTableRow, ...]:
    """One row per kernel block size; pure. Raises InputError on non-positive inputs."""
    request_lengths = positive_ints("kernel lengths", lengths)
    sizes = positive_ints("kernel block sizes", kernel_block_sizes)
    positive("table entry bytes", entry_bytes)
    rows = []
    for size in sizes:
        blocks = tuple(ceil_div(t, size) for t in request_lengths)
        table = len(blocks) * max(blocks)
        padding = table - sum(blocks)
        rows.append(
            KernelTableRow(
                kernel_block_size=size,
                blocks_by_request=blocks,
                max_blocks=max(blocks),
                table_cells=table,
                used_cells=sum(blocks),
                padding_cells=padding,
                table_bytes=table * entry_bytes,
                padding_bytes=padding * entry_bytes,
            )
        )
    return tuple(rows)

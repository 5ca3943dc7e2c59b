"""Copy-on-write cost of a fork that appends into a shared, partially filled tail block.

A fork at context length `offset` shares every mapped block. The first divergent append
cannot write into the shared tail block in place; it copies the tail's valid rows into a
freshly reserved private block and then appends (seed 000 0x05A, 0x09C):

    block_size P = 16, offset = 34
    |---- block 0 ----|---- block 1 ----|-- block 2 --...|
    0                 16                32  34
                                        ^^^^ r = 34 mod 16 = 2 valid shared tail rows
    copy rows [32, 34) into a private block, append row 34 there

Two quantities are easy to conflate and are kept apart:
- traffic: bytes the copy reads and writes plus the appended row (what the bus pays);
- capacity: the whole private block reserved for the copy (what the pool pays).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvctl.sizing.plan._checks import non_negative, positive, positive_ints


@dataclass(frozen=True, kw_only=True)
class CowCost:
    """Cost of the first divergent append after a fork.

    `valid_tail_rows` is r; when r == 0 the fork sits on a block boundary, nothing is
    copied, and `capacity_amplification` is None (not applicable, seed 000 0x09C).
    """

    offset: int
    block_size: int
    row_bytes_by_group: tuple[int, ...]
    bundle_row_bytes: int  # sum over cache groups of B_row,g
    valid_tail_rows: int  # r
    copy_payload_bytes: int  # r * sum_g B_row,g
    copy_read_write_bytes: int  # 2 * copy payload: source read + destination write
    append_write_bytes: int  # the one new row
    traffic_bytes: int  # Traffic_COW
    traffic_amplification: int  # Traffic_COW / one-row append = 2r + 1
    new_capacity_bytes: int  # one private block across all groups: P * sum_g B_row,g
    capacity_amplification: float | None  # P / r useful rows per reserved row


def cow_cost(*, offset: int, block_size: int, row_bytes_by_group: Sequence[int]) -> CowCost:
    """Cost of forking at context length `offset` and appending one divergent row.

    Pure; raises InputError for a negative offset, a non-positive block size, or row sizes
    that are not positive integers.
    """
    non_negative("offset", offset)
    positive("block size", block_size)
    rows = positive_ints("row bytes", row_bytes_by_group)
    bundle_row = sum(rows)
    tail_rows = offset % block_size  # seed 000 0x09C: r = offset mod P_a
    copy_payload = tail_rows * bundle_row  # seed 000 0x05A: B_copy = r * sum_g B_row,g
    traffic = 2 * copy_payload + bundle_row  # copy read + copy write + append write
    return CowCost(
        offset=offset,
        block_size=block_size,
        row_bytes_by_group=rows,
        bundle_row_bytes=bundle_row,
        valid_tail_rows=tail_rows,
        copy_payload_bytes=copy_payload,
        copy_read_write_bytes=2 * copy_payload,
        append_write_bytes=bundle_row,
        traffic_bytes=traffic,
        traffic_amplification=traffic // bundle_row,  # = 2r + 1 exactly
        new_capacity_bytes=block_size * bundle_row,
        capacity_amplification=(block_size / tail_rows) if tail_rows else None,
    )

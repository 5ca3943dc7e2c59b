"""Pages, tail waste, static reservation versus paging, and the seed 000 byte ledgers.

A sequence of S tokens in pages of P tokens (seed 003 "Quantitative trade-offs in block
sizing"; seed 000 0x02C):

    tokens   0 ........ P-1 | P ....... 2P-1 | ... | (n-1)P ... S-1  [unused tail]
    pages  |<--- page 0 --->|<--- page 1 --->| ... |<------ page n-1 ------------->|

    n      = ceil(S / P)
    tail   = (P - S mod P) mod P slots                      (Delta_tail)
    E[tail] = (P - 1) / 2 slots when S mod P is uniform     (seed 000 0x02G)

All functions are pure; bytes are ints except expectations (multiples of 0.5 slots).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.util.pages import ceil_div


def page_bytes(bytes_per_token: int, page_size: int) -> int:
    """M_block = P * B_row: one page's footprint on one rank (seed 003 napkin math 0.3)."""
    _positive("bytes per token", bytes_per_token)
    _positive("page size", page_size)
    return page_size * bytes_per_token


def pages_for(tokens: int, page_size: int) -> int:
    """ceil(S / P): pages a sequence of `tokens` tokens needs."""
    _non_negative("tokens", tokens)
    _positive("page size", page_size)
    return ceil_div(tokens, page_size)


def tail_slots(tokens: int, page_size: int) -> int:
    """Delta_tail = (P - S mod P) mod P: unused slots in the sequence's last page."""
    return pages_for(tokens, page_size) * page_size - tokens


def expected_tail_slots(page_size: int) -> float:
    """E[Delta_tail] = (P - 1) / 2 under a uniform last-page occupancy (seed 000 0x02G)."""
    _positive("page size", page_size)
    return (page_size - 1) / 2


@dataclass(frozen=True, kw_only=True)
class TailWaste:
    """Expected unused tail of `sequences` live sequences and its share of the pool."""

    page_size: int
    sequences: int
    slots_per_sequence: float
    bytes_per_sequence: float
    total_bytes: float
    share_of_pool: float


def tail_waste(sequences: int, page_size: int, bytes_per_token: int, pool_bytes: int) -> TailWaste:
    """Seed 003 napkin math 0.3: sequences * (P-1)/2 * B_row, and that over the pool."""
    _non_negative("sequences", sequences)
    _positive("pool", pool_bytes)
    slots = expected_tail_slots(page_size)
    per_sequence = slots * bytes_per_token
    total = sequences * per_sequence
    return TailWaste(
        page_size=page_size,
        sequences=sequences,
        slots_per_sequence=slots,
        bytes_per_sequence=per_sequence,
        total_bytes=total,
        share_of_pool=total / pool_bytes,
    )


@dataclass(frozen=True, kw_only=True)
class StaticVsPaged:
    """Worst-case contiguous reservation versus paging, for sequences of mean length E[S].

    Static: every admitted sequence reserves S_max tokens (seed 003 napkin math 0.2):
        reservation = S_max * B_row, B_static = floor(M_pool / reservation),
        eta_static  = E[S] / S_max, useful = B_static * E[S] * B_row.
    Paged: each sequence holds E[S] + (P-1)/2 slots on average (expected tail),
        B_paged = floor(M_pool / ((E[S] + (P-1)/2) * B_row)), eta_paged = E[S] / that.
    """

    max_tokens: int
    mean_tokens: int
    page_size: int
    reservation_bytes: int
    static_trajectories: int
    static_efficiency: float
    static_useful_bytes: int
    static_allocated_bytes: int
    static_idle_share: float
    paged_trajectories: int
    paged_efficiency: float


def static_vs_paged(
    max_tokens: int, mean_tokens: int, page_size: int, bytes_per_token: int, pool_bytes: int
) -> StaticVsPaged:
    """Compare the two allocators on one rank (see StaticVsPaged). InputError on bad sizes."""
    _positive("max length", max_tokens)
    _positive("mean length", mean_tokens)
    _positive("bytes per token", bytes_per_token)
    _positive("pool", pool_bytes)
    if mean_tokens > max_tokens:
        raise InputError(f"mean length {mean_tokens:,} exceeds the reserved length {max_tokens:,}")
    reservation = max_tokens * bytes_per_token
    static = pool_bytes // reservation
    useful = static * mean_tokens * bytes_per_token
    allocated = static * reservation
    paged_slots = mean_tokens + expected_tail_slots(page_size)
    return StaticVsPaged(
        max_tokens=max_tokens,
        mean_tokens=mean_tokens,
        page_size=page_size,
        reservation_bytes=reservation,
        static_trajectories=static,
        static_efficiency=mean_tokens / max_tokens,
        static_useful_bytes=useful,
        static_allocated_bytes=allocated,
        static_idle_share=(allocated - useful) / pool_bytes,
        paged_trajectories=int(pool_bytes // (paged_slots * bytes_per_token)),
        paged_efficiency=mean_tokens / paged_slots,
    )


# ----- seed 000 0x02B-0x02D: three ledgers that must not replace one another ---------------


@dataclass(frozen=True, kw_only=True)
class RectangularLedger:
    """0x02B: M_logical,ref = sum T_r * B_row; M_rect,reserved = sum T_max,r * B_row."""

    logical_rows: int
    reserved_rows: int
    logical_bytes: int
    reserved_bytes: int
    slack_bytes: int


def rectangular_ledger(
    committed_rows: Sequence[int], reserved_rows: Sequence[int], row_bytes: int
) -> RectangularLedger:
    """Contiguous per-request reservations. InputError if a request commits past its reserve."""
    if len(committed_rows) != len(reserved_rows):
        raise InputError("committed and reserved rows need one entry per request each")
    for used, reserved in zip(committed_rows, reserved_rows):
        _non_negative("committed rows", used)
        if used > reserved:
            raise InputError(f"a request commits {used} rows but reserves only {reserved}")
    logical, reserved = sum(committed_rows), sum(reserved_rows)
    return RectangularLedger(
        logical_rows=logical,
        reserved_rows=reserved,
        logical_bytes=logical * row_bytes,
        reserved_bytes=reserved * row_bytes,
        slack_bytes=(reserved - logical) * row_bytes,
    )


@dataclass(frozen=True, kw_only=True)
class PagedReferenceLedger:
    """0x02C: N_ref = sum ceil(T_r / P) block-table entries, counted per request view."""

    block_refs: int
    capacity_bytes: int
    logical_bytes: int
    tail_bytes: int


def paged_reference_ledger(
    committed_rows: Sequence[int], page_size: int, row_bytes: int
) -> PagedReferenceLedger:
    """Request-view capacity and tail, as if no block were shared."""
    refs = sum(pages_for(rows, page_size) for rows in committed_rows)
    logical = sum(committed_rows) * row_bytes
    capacity = refs * page_size * row_bytes
    return PagedReferenceLedger(
        block_refs=refs,
        capacity_bytes=capacity,
        logical_bytes=logical,
        tail_bytes=capacity - logical,
    )


@dataclass(frozen=True, kw_only=True)
class UniqueLedger:
    """0x02D: the union of block ids, what they materialize, and what sharing saved."""

    unique_blocks: int
    materialized_rows: int
    materialized_bytes: int
    capacity_bytes: int
    tail_bytes: int
    deduplicated_bytes: int
    avoided_capacity_bytes: int
    pool_idle_bytes: int | None


def unique_ledger(
    block_tables: Sequence[Sequence[int]],
    committed_rows: Sequence[int],
    page_size: int,
    row_bytes: int,
    pool_blocks: int | None = None,
) -> UniqueLedger:
    """Unique physical ledger of requests whose block tables may share block ids.

    A block's valid rows are the most any referencing request wrote into it:
        v_p = max over (request r, position l) with table_r[l] = p of min(P, T_r - l*P)
    InputError when a table's length is not ceil(T_r / P).
    """
    if len(block_tables) != len(committed_rows):
        raise InputError("block tables and committed rows need one entry per request each")
    valid: dict[int, int] = {}
    for table, rows in zip(block_tables, committed_rows):
        if len(table) != pages_for(rows, page_size):
            raise InputError(f"a request of {rows} rows needs {pages_for(rows, page_size)} "
                             f"blocks of {page_size}, its table has {len(table)}")
        for position, block in enumerate(table):
            filled = min(page_size, rows - position * page_size)
            valid[block] = max(valid.get(block, 0), filled)
    materialized = sum(valid.values())
    capacity = len(valid) * page_size * row_bytes
    reference = paged_reference_ledger(committed_rows, page_size, row_bytes)
    if pool_blocks is not None and pool_blocks < len(valid):
        raise InputError(f"{len(valid)} live blocks exceed a pool of {pool_blocks}")
    return UniqueLedger(
        unique_blocks=len(valid),
        materialized_rows=materialized,
        materialized_bytes=materialized * row_bytes,
        capacity_bytes=capacity,
        tail_bytes=capacity - materialized * row_bytes,
        deduplicated_bytes=reference.logical_bytes - materialized * row_bytes,
        avoided_capacity_bytes=reference.capacity_bytes - capacity,
        pool_idle_bytes=(None if pool_blocks is None
                         else (pool_blocks - len(valid)) * page_size * row_bytes),
    )


def _positive(label: str, value: int) -> None:
    if isinstance(value, bool) or value <= 0:
        raise InputError(f"{label} must be positive, got {value}")


def _non_negative(label: str, value: int) -> None:
    if isinstance(value, bool) or value < 0:
        raise InputError(f"{label} must not be negative, got {value}")

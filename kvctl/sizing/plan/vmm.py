"""vAttention page-group ledger: reservation is not commit (seed 000 0x06A, 0x06F, 0x0BJ).

vAttention keeps each layer's K and each layer's V tensor virtually contiguous, one
subrange of R bytes per request slot, and maps physical page groups of G bytes into it on
demand:

    one K or V tensor (of 2L), B request slots:
    |<------ R ------>|<------ R ------>|<------ R ------>|
    | q0 | q1 | q2 |  | q0 |            |                 |   VA reserved: 2 L B R
      G    G    G       G                                     mapped: page groups only
    tokens per page group P = G / B_tensor_row   (G must be a multiple of the row)

Four ledgers stay separate: reserved virtual address space M_VA, created physical handles
M_phys,pool, mapped handles, and valid K/V rows. M_VA is address-space occupancy, never
resident HBM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import non_negative, positive, positive_ints
from kvctl.util.pages import ceil_div


@dataclass(frozen=True, kw_only=True)
class PageFrontier:
    """Pages one request needs for T rows in one tensor, and the stranded tail (0x0BJ)."""

    tokens: int
    page_groups: int  # N = ceil(T / P_tokens)
    tail_bytes: int  # W = N * G - T * B_tensor_row
    mapped_bytes_all_tensors: int  # N * page bundle (2 L G): backing across all tensors


@dataclass(frozen=True, kw_only=True)
class VmmLedger:
    """The page-group ledger of one worker (seed 000 0x06A)."""

    layers: int
    request_slots: int
    max_context: int
    tensor_row_bytes: int  # B_tensor,row = H_kv d_h b, one layer, K or V
    page_group_bytes: int  # G
    tokens_per_page: int  # P_tokens = G / B_tensor,row
    reservation_per_request_tensor: int  # R = G ceil(T_max B_row / G)
    virtual_reservation_bytes: int  # M_VA = 2 L B R
    physical_handles: int
    physical_pool_bytes: int  # M_phys,pool = N_handle G
    page_bundle_bytes: int  # B_page-bundle = 2 L G
    frontiers: tuple[PageFrontier, ...]


def tokens_per_page_group(*, page_group_bytes: int, tensor_row_bytes: int) -> int:
    """P = G / B_tensor_row; raises InputError when G is not a multiple of the row."""
    positive("page group bytes", page_group_bytes)
    positive("tensor row bytes", tensor_row_bytes)
    if page_group_bytes % tensor_row_bytes:
        raise InputError(
            f"page group of {page_group_bytes} B is not a multiple of the "
            f"{tensor_row_bytes} B tensor row; tokens per page would not be whole"
        )
    return page_group_bytes // tensor_row_bytes


def page_frontier(
    *, tokens: int, page_group_bytes: int, tensor_row_bytes: int, layers: int
) -> PageFrontier:
    """Page groups and tail bytes for `tokens` rows of one tensor (seed 000 0x0BJ)."""
    non_negative("tokens", tokens)
    per_page = tokens_per_page_group(
        page_group_bytes=page_group_bytes, tensor_row_bytes=tensor_row_bytes
    )
    groups = ceil_div(tokens, per_page)
    return PageFrontier(
        tokens=tokens,
        page_groups=groups,
        tail_bytes=groups * page_group_bytes - tokens * tensor_row_bytes,
        mapped_bytes_all_tensors=groups * 2 * layers * page_group_bytes,
    )


def vmm_ledger(
    *,
    layers: int,
    request_slots: int,
    max_context: int,
    tensor_row_bytes: int,
    page_group_bytes: int,
    physical_handles: int,
    request_lengths: Sequence[int] = (),
) -> VmmLedger:
    """Build the ledger; pure. Raises InputError on non-positive sizes or a request
    longer than `max_context` (it would not fit its reserved subrange)."""
    positive("layers", layers)
    positive("request slots", request_slots)
    positive("max context", max_context)
    non_negative("physical handles", physical_handles)
    per_page = tokens_per_page_group(
        page_group_bytes=page_group_bytes, tensor_row_bytes=tensor_row_bytes
    )
    lengths = positive_ints("request lengths", request_lengths) if request_lengths else ()
    for length in lengths:
        if length > max_context:
            raise InputError(f"request length {length} exceeds max context {max_context}")
    # seed 000 0x06A: R = G * ceil(T_max * B_tensor,row / G), M_VA = 2 L B R
    reservation = page_group_bytes * ceil_div(max_context * tensor_row_bytes, page_group_bytes)
    return VmmLedger(
        layers=layers,
        request_slots=request_slots,
        max_context=max_context,
        tensor_row_bytes=tensor_row_bytes,
        page_group_bytes=page_group_bytes,
        tokens_per_page=per_page,
        reservation_per_request_tensor=reservation,
        virtual_reservation_bytes=2 * layers * request_slots * reservation,
        physical_handles=physical_handles,
        physical_pool_bytes=physical_handles * page_group_bytes,
        page_bundle_bytes=2 * layers * page_group_bytes,
        frontiers=tuple(
            page_frontier(
                tokens=length,
                page_group_bytes=page_group_bytes,
                tensor_row_bytes=tensor_row_bytes,
                layers=layers,
            )
            for length in lengths
        ),
    )


@dataclass(frozen=True, kw_only=True)
class PageGroupRow:
    """One page-group size against a set of request lengths (seed 000 0x0BJ)."""

    page_group_bytes: int
    tokens_per_page: int
    frontiers: tuple[PageFrontier, ...]


def page_group_table(
    *,
    tensor_row_bytes: int,
    page_group_sizes: Sequence[int],
    request_lengths: Sequence[int],
    layers: int,
) -> tuple[PageGroupRow, ...]:
    """The staircase of page groups and tail bytes per page-group size; pure.

    Raises InputError when a page-group size is not a multiple of the tensor row.
    """
    positive("layers", layers)
    sizes = positive_ints("page group sizes", page_group_sizes)
    lengths = positive_ints("request lengths", request_lengths)
    return tuple(
        PageGroupRow(
            page_group_bytes=size,
            tokens_per_page=tokens_per_page_group(
                page_group_bytes=size, tensor_row_bytes=tensor_row_bytes
            ),
            frontiers=tuple(
                page_frontier(
                    tokens=length,
                    page_group_bytes=size,
                    tensor_row_bytes=tensor_row_bytes,
                    layers=layers,
                )
                for length in lengths
            ),
        )
        for size in sizes
    )

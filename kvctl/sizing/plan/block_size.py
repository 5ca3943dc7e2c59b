"""Block size as a cost vector, never one score (seed 000 0x09-0x09C).

For a nested exact-prefix family (every shorter request is an exact prefix of the longest,
which was materialized first) and each candidate allocator block size P, report side by
side: request-view tails, unique physical tails, the declared metadata ledger, the
full-block prefix-hit staircase with and without the logits cap, and the copy-on-write
cost of a branch. Nothing here weighs one component against another.

Request view versus unique physical blocks, lengths [33, 25, 16], P = 16:

    A |0 ......... 15|16 ........ 31|32|   3 blocks, last holds 1 row
    B |0 ......... 15|16 .. 24|            2 blocks (same ids as A's first two)
    C |0 ......... 15|                     1 block  (same id as A's first)
    request view: 6 refs, 96 slots, tail 96 - 74 = 22 rows
    unique:       3 blocks, 48 slots, tail 48 - 33 = 15 rows
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import non_negative, positive, positive_ints
from kvctl.sizing.plan.cow import CowCost, cow_cost
from kvctl.util.pages import ceil_div


@dataclass(frozen=True, kw_only=True)
class MetadataRecordSizes:
    """Declared bytes per record for each metadata family (seed 000 0x02E).

    These are inputs, not measurements; the seed's fixture values (0x0D: 4, 32, 24, 2, 4
    and 128 fixed bytes) are synthetic and placement-unspecified.
    """

    map_entry: int  # I_map, per request block-table entry
    descriptor: int  # I_desc, per provisioned pool block
    cached_hash: int  # I_hash, per published full-block hash
    tail_record: int  # I_tail, per live request
    free_queue_item: int  # I_free, per free block
    fixed: int  # M_fixed


SEED_000_FIXTURE_RECORD_SIZES = MetadataRecordSizes(
    map_entry=4, descriptor=32, cached_hash=24, tail_record=2, free_queue_item=4, fixed=128
)


@dataclass(frozen=True, kw_only=True)
class MetadataLedger:
    """Counts and bytes of each record family; `total_bytes` is M_meta (seed 000 0x09B)."""

    request_block_refs: int
    pool_blocks: int
    cached_hashes: int
    live_requests: int
    free_blocks: int
    map_bytes: int
    descriptor_bytes: int
    hash_bytes: int
    tail_bytes: int
    free_queue_bytes: int
    fixed_bytes: int
    total_bytes: int


@dataclass(frozen=True, kw_only=True)
class PrefixHits:
    """Full-block prefix hits of the consumers (every request but the longest producer).

    `uncapped_tokens`: P*floor(T/P), requests that need no next-token logits.
    `capped_tokens`: P*floor((T-1)/P), generative requests after the 0x07A logits cap.
    `partial_tail_capped_tokens`: T-1 each, the immutable-partial-tail alternative (0x07D).
    `recomputed_tokens`: consumer prompt tokens left to prefill under the capped staircase.
    """

    consumer_lengths: tuple[int, ...]
    uncapped_by_request: tuple[int, ...]
    capped_by_request: tuple[int, ...]
    uncapped_tokens: int
    capped_tokens: int
    partial_tail_capped_tokens: int
    recomputed_tokens: int


@dataclass(frozen=True, kw_only=True)
class BlockSizeRow:
    """The cost vector for one allocator block size P_a."""

    block_size: int
    request_blocks: tuple[int, ...]  # ceil(T_r / P) per request
    request_view_slots: int
    request_view_tail_rows: int
    request_view_tail_bytes: int
    unique_blocks: int
    unique_tail_rows: int
    unique_tail_bytes: int
    metadata: MetadataLedger
    prefix_hits: PrefixHits
    cow: CowCost


@dataclass(frozen=True, kw_only=True)
class BlockSizePlan:
    """All rows plus the fixed facts they share."""

    request_lengths: tuple[int, ...]
    row_bytes: int
    pool_slots: int
    branch_offset: int
    record_sizes: MetadataRecordSizes
    rows: tuple[BlockSizeRow, ...]


def plan_block_sizes(
    *,
    block_sizes: Sequence[int],
    request_lengths: Sequence[int],
    row_bytes: int,
    pool_slots: int,
    branch_offset: int,
    record_sizes: MetadataRecordSizes,
) -> BlockSizePlan:
    """Evaluate the cost vector for every block size; pure.

    Raises InputError for empty or non-positive inputs, or when the pool (pool_slots // P
    blocks) cannot hold the family's unique blocks at some P.
    """
    sizes = positive_ints("block sizes", block_sizes)
    lengths = positive_ints("request lengths", request_lengths)
    positive("row bytes", row_bytes)
    positive("pool slots", pool_slots)
    non_negative("branch offset", branch_offset)
    for field_value in vars(record_sizes).values():
        non_negative("metadata record size", field_value)
    rows = tuple(
        _row(size, lengths, row_bytes, pool_slots, branch_offset, record_sizes) for size in sizes
    )
    return BlockSizePlan(
        request_lengths=lengths,
        row_bytes=row_bytes,
        pool_slots=pool_slots,
        branch_offset=branch_offset,
        record_sizes=record_sizes,
        rows=rows,
    )


def _row(
    block: int,
    lengths: tuple[int, ...],
    row_bytes: int,
    pool_slots: int,
    branch_offset: int,
    sizes: MetadataRecordSizes,
) -> BlockSizeRow:
    # seed 000 0x09B: N_r = ceil(T_r / P_a), W_r = N_r * P_a - T_r
    request_blocks = tuple(ceil_div(length, block) for length in lengths)
    view_slots = sum(request_blocks) * block
    view_tail = view_slots - sum(lengths)
    # Nested exact prefixes: the unique blocks are the longest request's path.
    longest = max(lengths)
    unique_blocks = ceil_div(longest, block)
    unique_tail = unique_blocks * block - longest
    pool_blocks = pool_slots // block  # a pool holds whole blocks only
    if unique_blocks > pool_blocks:
        raise InputError(
            f"a pool of {pool_slots} slots holds {pool_blocks} blocks of {block} tokens, "
            f"fewer than the {unique_blocks} unique blocks of the longest request"
        )
    metadata = _metadata(
        refs=sum(request_blocks),
        pool_blocks=pool_blocks,
        cached_hashes=longest // block,  # only full blocks publish a hash
        live_requests=len(lengths),
        free_blocks=pool_blocks - unique_blocks,
        sizes=sizes,
    )
    return BlockSizeRow(
        block_size=block,
        request_blocks=request_blocks,
        request_view_slots=view_slots,
        request_view_tail_rows=view_tail,
        request_view_tail_bytes=view_tail * row_bytes,
        unique_blocks=unique_blocks,
        unique_tail_rows=unique_tail,
        unique_tail_bytes=unique_tail * row_bytes,
        metadata=metadata,
        prefix_hits=_prefix_hits(block, lengths),
        cow=cow_cost(offset=branch_offset, block_size=block, row_bytes_by_group=(row_bytes,)),
    )


def _metadata(
    *,
    refs: int,
    pool_blocks: int,
    cached_hashes: int,
    live_requests: int,
    free_blocks: int,
    sizes: MetadataRecordSizes,
) -> MetadataLedger:
    # seed 000 0x09B: M_meta = N_refs b_map + N_pool b_desc + N_full b_hash + N_req b_tail
    #                         + N_free b_queue + M_fixed
    map_bytes = refs * sizes.map_entry
    descriptor_bytes = pool_blocks * sizes.descriptor
    hash_bytes = cached_hashes * sizes.cached_hash
    tail_bytes = live_requests * sizes.tail_record
    free_bytes = free_blocks * sizes.free_queue_item
    return MetadataLedger(
        request_block_refs=refs,
        pool_blocks=pool_blocks,
        cached_hashes=cached_hashes,
        live_requests=live_requests,
        free_blocks=free_blocks,
        map_bytes=map_bytes,
        descriptor_bytes=descriptor_bytes,
        hash_bytes=hash_bytes,
        tail_bytes=tail_bytes,
        free_queue_bytes=free_bytes,
        fixed_bytes=sizes.fixed,
        total_bytes=map_bytes + descriptor_bytes + hash_bytes + tail_bytes + free_bytes
        + sizes.fixed,
    )


def _prefix_hits(block: int, lengths: tuple[int, ...]) -> PrefixHits:
    # The longest request materialized the shared path first; the others look it up.
    producer_index = lengths.index(max(lengths))
    consumers = tuple(t for i, t in enumerate(lengths) if i != producer_index)
    uncapped = tuple(block * (t // block) for t in consumers)  # H_r^full
    capped = tuple(block * ((t - 1) // block) for t in consumers)  # H_r^full,gen (0x07A cap)
    return PrefixHits(
        consumer_lengths=consumers,
        uncapped_by_request=uncapped,
        capped_by_request=capped,
        uncapped_tokens=sum(uncapped),
        capped_tokens=sum(capped),
        partial_tail_capped_tokens=sum(t - 1 for t in consumers),
        recomputed_tokens=sum(consumers) - sum(capped),
    )

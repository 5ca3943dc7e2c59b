"""The block-size cost vector (seed 000 0x09B, 0x09C, 0x0D) and kernel tables (0x0AB)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.plan.block_size import SEED_000_FIXTURE_RECORD_SIZES, plan_block_sizes
from kvctl.sizing.plan.kernel_table import kernel_tables

pytestmark = pytest.mark.unit

KIB = 1024
MIB = 1024 * KIB


def _plan(*sizes):
    """The 0x09B fixture: lengths [33, 25, 16], 64 KiB rows, 128-slot pool, branch at 20."""
    plan = plan_block_sizes(
        block_sizes=sizes or (4, 8, 16, 32, 64),
        request_lengths=(33, 25, 16),
        row_bytes=64 * KIB,
        pool_slots=128,
        branch_offset=20,
        record_sizes=SEED_000_FIXTURE_RECORD_SIZES,
    )
    return {row.block_size: row for row in plan.rows}


def test_seed_000_0x0D_request_view_ledger_at_p16():
    """0x0D: 6 refs, 96 slots, 6 MiB request view; tail 22 rows = 1.375 MiB."""
    row = _plan(16)[16]
    assert row.request_blocks == (3, 2, 1)
    assert row.request_view_slots == 96
    assert row.request_view_slots * 64 * KIB == 6 * MIB
    assert row.request_view_tail_rows == 22
    assert row.request_view_tail_bytes == int(1.375 * MIB)


def test_seed_000_0x0D_unique_ledger_at_p16():
    """0x0D: unique blocks {100, 101, 102}: 3 blocks, tail 15 rows = 0.9375 MiB."""
    row = _plan(16)[16]
    assert row.unique_blocks == 3
    assert row.unique_tail_rows == 15
    assert row.unique_tail_bytes == int(0.9375 * MIB)


def test_seed_000_0x0D_metadata_is_482_bytes():
    """0x0D: M_meta = 24 + 256 + 48 + 6 + 20 + 128 = 482 synthetic bytes."""
    meta = _plan(16)[16].metadata
    assert (meta.map_bytes, meta.descriptor_bytes, meta.hash_bytes) == (24, 256, 48)
    assert (meta.tail_bytes, meta.free_queue_bytes, meta.fixed_bytes) == (6, 20, 128)
    assert meta.total_bytes == 482


def test_seed_000_0x09B_small_blocks_p4():
    """0x09B: at P=4 the unique tail is 3 * 64 KiB = 192 KiB, 32 descriptors, 20 map entries."""
    row = _plan(4)[4]
    assert row.unique_tail_bytes == 192 * KIB
    assert row.metadata.pool_blocks == 32
    assert row.metadata.request_block_refs == 20


def test_seed_000_0x09B_large_blocks_p32():
    """0x09B: at P=32 one partial block leaves 31 * 64 KiB = 1.9375 MiB; request view is larger."""
    row = _plan(32)[32]
    assert row.unique_tail_bytes == int(1.9375 * MIB)
    assert row.request_view_tail_bytes > row.unique_tail_bytes


def test_seed_000_0x09B_metadata_falls_as_blocks_grow():
    """0x09B: metadata falls with P (kvctl's totals: 1,522 / 830 / 482 / 310 / 214 B)."""
    totals = [row.metadata.total_bytes for row in _plan().values()]
    assert totals == [1522, 830, 482, 310, 214]


def test_seed_000_0x09B_capped_staircase():
    """0x09B: with the logits cap, B+C reuse 36, 32, 16, 0, 0 tokens and recompute 5, 9, 25, 41, 41."""
    rows = _plan().values()
    assert [r.prefix_hits.capped_tokens for r in rows] == [36, 32, 16, 0, 0]
    assert [r.prefix_hits.recomputed_tokens for r in rows] == [5, 9, 25, 41, 41]


def test_seed_000_0x09B_uncapped_staircase():
    """0x09B: H = P floor(T/P) without the cap (kvctl: 40, 40, 32, 0, 0; the seed's table is not in the text)."""
    assert [r.prefix_hits.uncapped_tokens for r in _plan().values()] == [40, 40, 32, 0, 0]


def test_seed_000_0x09B_partial_tail_alternative_reuses_39():
    """0x09B / 0x07D: capped immutable partial tails reuse 39 tokens (24 for B, 15 for C)."""
    assert _plan(16)[16].prefix_hits.partial_tail_capped_tokens == 39


def test_seed_000_0x07E_one_block_edge_at_p16():
    """0x09B: at P=16, C's cap of 15 rows aligns down to zero; its whole block is recomputed."""
    hits = _plan(16)[16].prefix_hits
    assert hits.consumer_lengths == (25, 16)
    assert hits.capped_by_request == (16, 0)


def test_seed_000_0x09C_cow_per_block_size():
    """0x09C: r = 20 mod P: 0, 4, 4, 20, 20 for P = 4..64."""
    assert [r.cow.valid_tail_rows for r in _plan().values()] == [0, 4, 4, 20, 20]


def test_pool_too_small_for_unique_blocks_is_rejected():
    """A pool of 16 slots cannot hold the 3 unique 16-token blocks of a 33-token request."""
    with pytest.raises(InputError, match="fewer than the 3 unique blocks"):
        plan_block_sizes(block_sizes=(16,), request_lengths=(33, 25, 16), row_bytes=64 * KIB,
                         pool_slots=16, branch_offset=20, record_sizes=SEED_000_FIXTURE_RECORD_SIZES)


def test_seed_000_0x0AB_kernel_table_padding():
    """0x0AB: lengths [64, 63, 17, 1] at P_k=16: n = 4,4,2,1; table 16 cells, 11 used, 5 padding."""
    (row,) = kernel_tables(lengths=(64, 63, 17, 1), kernel_block_sizes=(16,), entry_bytes=4)
    assert row.blocks_by_request == (4, 4, 2, 1)
    assert (row.table_cells, row.used_cells, row.padding_cells) == (16, 11, 5)
    assert row.table_bytes == 64


def test_seed_000_0x0AB_one_long_row_sets_n_max():
    """0x0AB: a few long rows set n_max for every short row (P_k=4: 64 cells, 38 used, 26 pad)."""
    (row,) = kernel_tables(lengths=(64, 63, 17, 1), kernel_block_sizes=(4,), entry_bytes=4)
    assert (row.max_blocks, row.table_cells, row.used_cells, row.padding_cells) == (16, 64, 38, 26)

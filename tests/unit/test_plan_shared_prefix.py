"""Shared-prefix execution ledger (seed 000 0x0BE, 0x0BI)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.plan.shared_prefix import Chunk, batch_ledger, partial_row_bytes, tree_ledger

pytestmark = pytest.mark.unit

KIB = 1024
SEED_TREE = (
    Chunk(name="C0", rows=2, begin=0, end=4),
    Chunk(name="C1", rows=1, begin=0, end=2),
    Chunk(name="C2", rows=2, begin=2, end=4),
    Chunk(name="C3", rows=2, begin=0, end=1),
    Chunk(name="C4", rows=1, begin=1, end=2),
    Chunk(name="C5", rows=1, begin=2, end=3),
    Chunk(name="C6", rows=1, begin=3, end=4),
)


def _batch():
    """0x0BI: B=8, S=64, U=[8,8,8,8,16,16,16,16], 512 B rows, 128 FP16 outputs + two FP32."""
    return batch_ledger(shared_prefix=64, suffixes=(8, 8, 8, 8, 16, 16, 16, 16), kv_row_bytes=512,
                        partial_row=partial_row_bytes(value_dim=128, output_bytes=2, state_bytes=4),
                        chunk_sizes=(16, 32, 64))


def test_seed_000_0x0BI_row_counts():
    """0x0BI: 608 logical rows, 160 unique, 448 saved."""
    rows = _batch().rows
    assert (rows.logical_rows, rows.unique_rows, rows.saved_rows) == (608, 160, 448)


def test_seed_000_0x0BI_payloads():
    """0x0BI: 304 KiB baseline, 80 KiB shared, 224 KiB saved."""
    rows = _batch().rows
    assert rows.baseline_payload_bytes == 304 * KIB
    assert rows.shared_payload_bytes == 80 * KIB
    assert rows.saved_payload_bytes == 224 * KIB


def test_seed_000_0x0BI_partial_state_per_chunk_size():
    """0x0BI: N_partial = B ceil(S/P_c), 264 B each: 8,448 / 4,224 / 2,112 B at P_c 16/32/64."""
    ledger = _batch()
    assert ledger.partial_row_bytes == 264
    assert [r.partial_rows for r in ledger.by_chunk_size] == [32, 16, 8]
    assert [r.partial_bytes for r in ledger.by_chunk_size] == [8448, 4224, 2112]


def test_seed_000_0x0BI_traversal_per_chunk_size():
    """0x0BI: ordinary vs shared chunk visits (kvctl: 40/12 at 16, 24/10 at 32, 16/9 at 64)."""
    rows = _batch().by_chunk_size
    assert [(r.ordinary_chunks, r.shared_chunks) for r in rows] == [(40, 12), (24, 10), (16, 9)]


def test_seed_000_0x0BE_rows():
    """0x0BE: 19 logical pairs, 10 unique rows, 9 saved reads; 190 B vs 100 B at 10 B rows."""
    ledger = tree_ledger(chunks=SEED_TREE, kv_row_bytes=10, partial_row=14)
    assert (ledger.rows.logical_rows, ledger.rows.unique_rows, ledger.rows.saved_rows) == (19, 10, 9)
    assert (ledger.rows.baseline_payload_bytes, ledger.rows.shared_payload_bytes) == (190, 100)


def test_seed_000_0x0BE_partial_buffer_is_112_bytes():
    """0x0BE: partial rows 4 + 2 + 2 = 8 of d_v*2 + 4 + 4 = 14 B: 112 B."""
    row = partial_row_bytes(value_dim=3, output_bytes=2, state_bytes=4)
    ledger = tree_ledger(chunks=SEED_TREE, kv_row_bytes=10, partial_row=row)
    assert row == 14
    assert ledger.partial_rows == 8
    assert ledger.partial_bytes == 112


def test_overlapping_intervals_are_not_a_tree():
    """Intervals [0,3) and [2,4) overlap without nesting: rejected."""
    chunks = (Chunk(name="a", rows=1, begin=0, end=3), Chunk(name="b", rows=1, begin=2, end=4))
    with pytest.raises(InputError, match="overlap without nesting"):
        tree_ledger(chunks=chunks, kv_row_bytes=10, partial_row=14)


def test_uncovered_sequence_is_rejected():
    """A sequence index no chunk covers means the tree is incomplete."""
    chunks = (Chunk(name="a", rows=1, begin=0, end=1), Chunk(name="b", rows=1, begin=2, end=3))
    with pytest.raises(InputError, match="sequence 1 is covered by no chunk"):
        tree_ledger(chunks=chunks, kv_row_bytes=10, partial_row=14)

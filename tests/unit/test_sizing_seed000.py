"""Seed 000 (KV memory layout and exact reuse) worked byte accounting, reproduced exactly.

0x02A (one physical row), 0x02B-0x02D (rectangular, request-view and unique ledgers) on
the 0x0D worked ledger, 0x02G (expected tail), and 0x0D's model-wide illustration.
The Loop 2 layout is 32 layers, 8 KV heads of 128, FP16 K and V, TP=2: Llama-3-8B's rows.
"""

from __future__ import annotations

import pytest

from kvctl.sizing import paging
from kvctl.sizing.models import resolve_model
from kvctl.util.units import KIB, MIB

pytestmark = pytest.mark.unit

LAYOUT = resolve_model("Llama-3-8B")
ROW = 64 * KIB  # B_row,rank of 0x02A
COMMITTED = (33, 25, 16)  # requests A, B, C of 0x0D
RESERVED = (64, 48, 32)
TABLES = ((100, 101, 102), (100, 101), (100,))  # nested exact-prefix family


def test_0x02a_row_is_64_kib_per_rank():
    """0x02A: 32 x 4 local heads x 128 x (2 + 2) bytes = 65,536 B per token on one TP rank."""
    assert LAYOUT.bytes_per_token("fp16", tp=2) == 65_536 == ROW


def test_0x02a_model_wide_row_is_128_kib():
    """0x02A: two disjoint K/V-head shards make a 128 KiB model-wide row."""
    assert LAYOUT.model_bytes_per_token("fp16") == 128 * KIB


def test_0x0d_rectangular_ledger():
    """0x0D: 74 rows = 4.625 MiB logical; 144 reserved = 9 MiB; slack 70 rows = 4.375 MiB."""
    ledger = paging.rectangular_ledger(COMMITTED, RESERVED, ROW)
    assert (ledger.logical_rows, ledger.reserved_rows) == (74, 144)
    assert ledger.logical_bytes == int(4.625 * MIB)
    assert ledger.reserved_bytes == 9 * MIB
    assert ledger.slack_bytes == int(4.375 * MIB) == 70 * ROW


def test_0x0d_request_view_ledger():
    """0x0D: six block-table entries = 96 slots = 6 MiB; tail (96 - 74) rows = 1.375 MiB."""
    ledger = paging.paged_reference_ledger(COMMITTED, 16, ROW)
    assert ledger.block_refs == 6
    assert ledger.capacity_bytes == 6 * MIB
    assert ledger.tail_bytes == int(1.375 * MIB) == 22 * ROW


def test_0x0d_unique_ledger():
    """0x0D: blocks {100, 101, 102} materialize 16 + 16 + 1 = 33 rows = 2.0625 MiB in
    3 MiB of capacity, 15 tail slots = 0.9375 MiB."""
    ledger = paging.unique_ledger(TABLES, COMMITTED, 16, ROW)
    assert ledger.unique_blocks == 3
    assert ledger.materialized_rows == 33
    assert ledger.materialized_bytes == int(2.0625 * MIB)
    assert ledger.capacity_bytes == 3 * MIB
    assert ledger.tail_bytes == int(0.9375 * MIB) == 15 * ROW


def test_0x0d_sharing_identities():
    """0x0D: 6 MiB = 3 MiB unique + 3 MiB avoided by sharing;
    4.625 MiB = 2.0625 MiB unique materialized + 2.5625 MiB deduplicated."""
    reference = paging.paged_reference_ledger(COMMITTED, 16, ROW)
    unique = paging.unique_ledger(TABLES, COMMITTED, 16, ROW)
    assert unique.avoided_capacity_bytes == 3 * MIB
    assert reference.capacity_bytes == unique.capacity_bytes + unique.avoided_capacity_bytes
    assert unique.deduplicated_bytes == int(2.5625 * MIB)
    assert reference.logical_bytes == unique.materialized_bytes + unique.deduplicated_bytes


def test_0x0d_pool_ledger():
    """0x0D: an 8-block pool is 8 MiB; 3 MiB live unique leaves 5 MiB idle and reusable."""
    ledger = paging.unique_ledger(TABLES, COMMITTED, 16, ROW, pool_blocks=8)
    assert paging.page_bytes(ROW, 16) * 8 == 8 * MIB
    assert ledger.pool_idle_bytes == 5 * MIB


def test_0x02g_expected_tail_is_480_kib():
    """0x02G: P = 16, B_row = 64 KiB: (P - 1)/2 = 7.5 slots = 480 KiB per terminal block."""
    assert paging.expected_tail_slots(16) == 7.5
    waste = paging.tail_waste(1, 16, ROW, 8 * MIB)
    assert waste.bytes_per_sequence == 480 * KIB


def test_0x02g_fixture_observes_15_unique_tail_slots():
    """0x02G: the fixture's longest request ends one row into a block: 15 unused slots."""
    assert paging.tail_slots(33, 16) == 15


def test_0x0d_model_wide_illustration():
    """0x0D illustration: 128 KiB/token, 2 MiB per 16-token block; a 4,096-token prompt is
    256 blocks and 512 MiB; 3,072 hit tokens are 192 blocks; 1,024 decode rows 128 MiB,
    1,023 rows (ordinary stop) 127.875 MiB."""
    row = LAYOUT.model_bytes_per_token("fp16")
    assert paging.page_bytes(row, 16) == 2 * MIB
    assert paging.pages_for(4096, 16) == 256
    assert LAYOUT.trajectory_bytes(4096, "fp16") == 512 * MIB
    assert paging.pages_for(3072, 16) == 192
    assert 1024 * row == 128 * MIB
    assert 1023 * row == int(127.875 * MIB)

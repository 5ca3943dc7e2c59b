"""Copy-on-write cost of a fork (seed 000 0x05A, 0x09C)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.plan.cow import cow_cost

pytestmark = pytest.mark.unit

KIB = 1024


def test_seed_000_0x05A_two_group_trace():
    """0x05A/0x05B: fork at 34 tokens, P=16, rows 48+16 KiB: r=2, 320 KiB traffic, 5x, 1 MiB capacity."""
    cost = cow_cost(offset=34, block_size=16, row_bytes_by_group=(48 * KIB, 16 * KIB))
    assert cost.valid_tail_rows == 2
    assert cost.bundle_row_bytes == 64 * KIB
    assert cost.copy_payload_bytes == 128 * KIB
    assert cost.copy_read_write_bytes == 256 * KIB
    assert cost.append_write_bytes == 64 * KIB
    assert cost.traffic_bytes == 320 * KIB
    assert cost.traffic_amplification == 5
    assert cost.new_capacity_bytes == 1024 * KIB


@pytest.mark.parametrize("tail_rows", [1, 2, 7, 15])
def test_traffic_amplification_is_two_r_plus_one(tail_rows):
    """0x05A: A_COW = Traffic_COW / one-row append = 2r + 1 for any valid tail r."""
    cost = cow_cost(offset=32 + tail_rows, block_size=16, row_bytes_by_group=(4096,))
    assert cost.traffic_amplification == 2 * tail_rows + 1


def test_seed_000_0x09C_capacity_amplification_at_p16():
    """0x09C: 20 shared tokens, P=16: r=4, copy R+W 2*4*64 KiB = 512 KiB, 1 MiB reserved, P/r = 4."""
    cost = cow_cost(offset=20, block_size=16, row_bytes_by_group=(64 * KIB,))
    assert cost.valid_tail_rows == 4
    assert cost.copy_read_write_bytes == 512 * KIB
    assert cost.new_capacity_bytes == 1024 * KIB
    assert cost.capacity_amplification == 4.0


def test_fork_on_block_boundary_copies_nothing():
    """0x09C: r = 0 means a fresh block and no copy; capacity amplification is not applicable."""
    cost = cow_cost(offset=32, block_size=16, row_bytes_by_group=(64 * KIB,))
    assert cost.copy_payload_bytes == 0
    assert cost.traffic_amplification == 1
    assert cost.capacity_amplification is None


def test_zero_block_size_is_rejected():
    """A block size of 0 is bad input, not a division by zero."""
    with pytest.raises(InputError, match="block size"):
        cow_cost(offset=20, block_size=0, row_bytes_by_group=(64 * KIB,))

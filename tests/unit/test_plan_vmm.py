"""vAttention page-group ledger (seed 000 0x06A, 0x06F, 0x0BJ)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.models import resolve_model
from kvctl.sizing.plan.vmm import page_frontier, page_group_table, vmm_ledger

pytestmark = pytest.mark.unit

KIB = 1024


def _fixture_ledger(**extra):
    """0x06F: L=2, B=3, T_max=12, H_kv=2, d_h=4, b=2 B, G=64 B, 12 handles."""
    return vmm_ledger(layers=2, request_slots=3, max_context=12, tensor_row_bytes=2 * 4 * 2,
                      page_group_bytes=64, physical_handles=12, **extra)


def test_seed_000_0x06F_reservation():
    """0x06F: B_tensor,row 16 B, P_tokens 4, R 192 B per request and tensor, M_VA 2304 B."""
    ledger = _fixture_ledger()
    assert ledger.tensor_row_bytes == 16
    assert ledger.tokens_per_page == 4
    assert ledger.reservation_per_request_tensor == 192
    assert ledger.virtual_reservation_bytes == 2304


def test_seed_000_0x06F_physical_pool_and_bundle():
    """0x06F: M_phys,pool = 12 * 64 = 768 B; one page bundle = 2 * 2 * 64 = 256 B."""
    ledger = _fixture_ledger()
    assert ledger.physical_pool_bytes == 768
    assert ledger.page_bundle_bytes == 256


def test_seed_000_0x06F_growth_to_nine_tokens_needs_page_q2():
    """0x06F: D growing from 8 to 9 tokens needs a third page group (q=2)."""
    ledger = _fixture_ledger(request_lengths=(8, 9))
    assert [f.page_groups for f in ledger.frontiers] == [2, 3]


def test_seed_000_0x0BJ_llama3_8b_row_is_2048_bytes():
    """0x0BJ: Llama-3-8B at TP-1 has one-layer K or V rows of 2,048 bytes."""
    geometry = resolve_model("Llama-3-8B")
    assert geometry.kv_heads_per_rank(1) * geometry.head_dim * 2 == 2048


def test_seed_000_0x0BJ_1024_tokens_land_on_every_boundary():
    """0x0BJ: 1,024 rows of 2,048 B fill 64 KiB..2 MiB page groups exactly: no tail."""
    rows = page_group_table(tensor_row_bytes=2048, page_group_sizes=(64 * KIB, 128 * KIB, 256 * KIB, 2048 * KIB),
                            request_lengths=(1024,), layers=32)
    assert [r.tokens_per_page for r in rows] == [32, 64, 128, 1024]
    assert [r.frontiers[0].page_groups for r in rows] == [32, 16, 8, 1]
    assert [r.frontiers[0].tail_bytes for r in rows] == [0, 0, 0, 0]


def test_seed_000_0x0BJ_token_1025_exposes_the_staircase():
    """0x0BJ: the 1,025th token needs one more group; tail = N G - T * 2048 (63,488 B at 64 KiB)."""
    rows = page_group_table(tensor_row_bytes=2048, page_group_sizes=(64 * KIB, 2048 * KIB),
                            request_lengths=(1025,), layers=32)
    assert [r.frontiers[0].page_groups for r in rows] == [33, 2]
    assert [r.frontiers[0].tail_bytes for r in rows] == [63_488, 2_095_104]


def test_page_group_not_a_multiple_of_the_row_is_rejected():
    """0x06A assumes G divisible by the row; 100 B over a 16 B row is bad input."""
    with pytest.raises(InputError, match="not a multiple"):
        page_frontier(tokens=4, page_group_bytes=100, tensor_row_bytes=16, layers=2)


def test_request_longer_than_reservation_is_rejected():
    """A 13-token request does not fit a 12-row reserved subrange."""
    with pytest.raises(InputError, match="exceeds max context"):
        _fixture_ledger(request_lengths=(13,))

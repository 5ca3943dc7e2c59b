"""Pages, tails, static vs paged, and ledger validation (kvctl.sizing.paging)."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.sizing import paging

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("tokens", "pages", "tail"), [(0, 0, 0), (1, 1, 15), (16, 1, 0), (17, 2, 15)]
)
def test_pages_and_tail_slots(tokens, pages, tail):
    """n = ceil(S/P) and Delta_tail = (P - S mod P) mod P at P = 16."""
    assert paging.pages_for(tokens, 16) == pages
    assert paging.tail_slots(tokens, 16) == tail


def test_page_size_one_has_no_tail():
    """SGLang's default page size 1 wastes nothing: (1 - 1)/2 = 0."""
    assert paging.expected_tail_slots(1) == 0.0


def test_zero_page_size_is_an_input_error():
    """Page size 0 is refused."""
    with pytest.raises(InputError, match="page size must be positive"):
        paging.page_bytes(1_024, 0)


def test_static_vs_paged_counts_expected_tail():
    """Paged: E[S] + (P-1)/2 = 2,055.5 slots per sequence; 10,000,000 B / (2,055.5 x 100 B) = 48."""
    result = paging.static_vs_paged(8_192, 2_048, 16, 100, 10_000_000)
    assert result.static_trajectories == 12
    assert result.paged_trajectories == 48
    assert result.paged_efficiency == 2_048 / 2_055.5


def test_static_vs_paged_rejects_mean_above_max():
    """The mean length cannot exceed the reserved length."""
    with pytest.raises(InputError, match="exceeds the reserved length"):
        paging.static_vs_paged(1_024, 2_048, 16, 100, 10_000_000)


def test_rectangular_ledger_rejects_overcommit():
    """A request cannot commit more rows than it reserved."""
    with pytest.raises(InputError, match="commits 40 rows but reserves only 32"):
        paging.rectangular_ledger((40,), (32,), 1)


def test_unique_ledger_rejects_wrong_table_length():
    """A 33-row request at P=16 needs 3 block ids."""
    with pytest.raises(InputError, match="needs 3 blocks"):
        paging.unique_ledger(((1, 2),), (33,), 16, 1)


def test_unique_ledger_rejects_pool_smaller_than_live_blocks():
    """Live unique blocks cannot exceed the provisioned pool."""
    with pytest.raises(InputError, match="exceed a pool of 1"):
        paging.unique_ledger(((1, 2),), (20,), 16, 1, pool_blocks=1)


def test_unique_ledger_without_sharing_equals_reference_view():
    """Disjoint tables: unique capacity equals request-view capacity, nothing deduplicated."""
    unique = paging.unique_ledger(((1,), (2, 3)), (10, 20), 16, 2)
    assert unique.unique_blocks == 3
    assert (unique.avoided_capacity_bytes, unique.deduplicated_bytes) == (0, 0)
    assert unique.tail_bytes == (48 - 30) * 2

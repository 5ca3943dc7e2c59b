"""Pool budgets and capacities (kvctl.sizing.pool), including SGLang's mem_fraction_static rule."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.sizing import pool
from kvctl.util.units import GIB

pytestmark = pytest.mark.unit


def test_weights_per_rank_rounds_up():
    """Eq. (4) in whole bytes: 7 params x 2 bytes over TP=4 is 3.5 -> 4 bytes."""
    assert pool.weights_per_rank(7, "bf16", tp=4) == 4


def test_weights_per_rank_uses_tp_times_pp():
    """Eq. (4): 70e9 x 1 byte (fp8) over TP=4 x PP=2 = 8.75e9 bytes."""
    assert pool.weights_per_rank(70_000_000_000, "fp8", tp=4, pp=2) == 8_750_000_000


def test_reserve_budget_subtracts_weights_and_reserve():
    """Eq. (5): 80 GiB - 20 GiB - 4 GiB = 56 GiB."""
    budget = pool.reserve_budget(80 * GIB, 20 * GIB, 4 * GIB)
    assert (budget.rule, budget.pool_bytes) == ("reserve", 56 * GIB)


def test_reserve_budget_refuses_an_empty_pool():
    """Weights plus reserve that fill the GPU leave no pool: InputError."""
    with pytest.raises(InputError, match="leave no KV pool"):
        pool.reserve_budget(80 * GIB, 78 * GIB, 2 * GIB)


def test_reserve_budget_refuses_negative_weights():
    """Negative sizes are refused."""
    with pytest.raises(InputError, match="weights must not be negative"):
        pool.reserve_budget(80 * GIB, -1, 0)


def test_sglang_rule_rest_is_free_after_load_minus_slack():
    """rest = (80 - 16) GiB - 80 GiB x (1 - 0.9) = 56 GiB (float GiB arithmetic as SGLang's)."""
    budget = pool.sglang_budget(80 * GIB, 16 * GIB, 0.9)
    expected_gib = (80 * GIB - 16 * GIB) / (1 << 30) - 80 * GIB / (1 << 30) * (1 - 0.9)
    assert budget.pool_bytes == int(expected_gib * (1 << 30))
    assert budget.pool_bytes == 60_129_542_144  # exactly 56 GiB for these inputs
    assert budget.rule == "mem_fraction_static"


def test_sglang_rule_names_minimum_fraction_when_weights_do_not_fit():
    """Too small a fraction: InputError naming SGLang's minimum viable fraction 1 - avail/pre."""
    with pytest.raises(InputError, match="more than 0.7500"):
        pool.sglang_budget(80 * GIB, 60 * GIB, 0.7)


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_sglang_rule_rejects_fractions_outside_0_1(fraction):
    """mem_fraction_static must lie in (0, 1]."""
    with pytest.raises(InputError, match="--mem-fraction must be in"):
        pool.sglang_budget(80 * GIB, 10 * GIB, fraction)


def test_pool_tokens_align_down_to_pages():
    """(1,000,000 B - 0) // 100 B = 10,000 tokens -> 9,984 at page 64."""
    assert pool.pool_tokens(1_000_000, 100, page_size=64) == 9_984
    assert pool.pool_pages(1_000_000, 100, page_size=64) == 156


def test_pool_tokens_subtract_fixed_overhead():
    """A fixed overhead is charged before dividing (SGLang's page-shard scratch)."""
    assert pool.pool_tokens(1_000_000, 100, overhead_bytes=500_000) == 5_000


def test_max_trajectories_floors():
    """B_max = floor(pool / footprint)."""
    assert pool.max_trajectories(999, 100) == 9


def test_concurrent_trajectories_refuses_oversized_shared_prefix():
    """A shared prefix larger than the usable pool is an InputError."""
    with pytest.raises(InputError, match="exceeds the usable pool"):
        pool.concurrent_trajectories(1_000, 10, shared_prefix_tokens=2_000)

"""Capacity for agent workloads (seed 003 eq. 3-7, napkin math 0.1 and 0.7, Table 7)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.plan.capacity import hbm_split, plan_capacity
from kvctl.sizing.plan.capacity_workload import admission_ceiling, branching, demand, tool_wait_concurrency
from kvctl.sizing.pool import weights_per_rank

pytestmark = pytest.mark.unit

M_TOKEN = 327_680
GB = 10**9
GIB = 2**30


def _node(hbm=80 * GB, weights=17_500_000_000, runtime=4_500_000_000, **workload):
    """Napkin 0.7's node: 8 GPUs, TP=8, 80 GB each, 17.5 GB weights and 4.5 GB runtime per GPU."""
    split = hbm_split(hbm_bytes=hbm, weights_bytes=weights, runtime_bytes=runtime, devices=8)
    inputs = dict(context_tokens=32_768, output_tokens=2_048)
    inputs.update(workload)
    return plan_capacity(split=split, bytes_per_token=M_TOKEN, bytes_per_token_per_device=M_TOKEN // 8,
                         tp=8, **inputs)


def test_seed_003_napkin_0_7_weights_per_gpu():
    """Napkin 0.7 step 1, eq. (4): 70e9 x 2 / 8 = 17.5 GB per GPU."""
    assert weights_per_rank(70_000_000_000, "bf16", tp=8) == 17_500_000_000


def test_seed_003_napkin_0_7_pool():
    """Napkin 0.7 step 2, eq. (5): 80 - 22 = 58 GB per GPU, 464 GB per node."""
    split = _node().split
    assert split.kv_pool_bytes == 58 * GB
    assert split.node_kv_pool_bytes == 464 * GB


def test_seed_003_napkin_0_7_token_capacity():
    """Napkin 0.7 step 3: 40 KiB per GPU per token; 464e9 / 327,680 = 1,416,015 tokens."""
    plan = _node()
    assert plan.bytes_per_token_per_device == 40_960
    assert plan.capacity_tokens == 1_416_015


def test_seed_003_napkin_0_7_unshared_36():
    """Napkin 0.7 step 4: usable 0.9 x 1,416,015 = 1,274,413; floor(1,274,413 / 34,816) = 36."""
    plan = _node()
    assert plan.usable_tokens_per_replica == 1_274_413
    assert plan.tokens_per_trajectory_unshared == 34_816
    assert plan.max_trajectories_unshared == 36


def test_seed_003_napkin_0_7_shared_122():
    """Napkin 0.7 step 5: 24,576 shared tokens held once, 8,192 + 2,048 private each: 122."""
    plan = _node(shared_tokens=24_576)
    assert plan.private_tokens_per_trajectory == 10_240
    assert plan.sharing_factor == 0.75
    assert plan.max_trajectories_shared == 122


def test_seed_003_napkin_0_7_gain_is_3_39x_not_3_38x():
    """The seed prints 3.38x; 122 / 36 = 3.3889, which rounds to 3.39 (the seed truncated)."""
    assert round(_node(shared_tokens=24_576).shared_gain, 2) == 3.39


@pytest.mark.parametrize(("context", "expected"), [(8_192, 155), (32_768, 38), (65_536, 19), (131_072, 9)])
def test_seed_003_table_7_h100_cold_rows(context, expected):
    """Table 7: 8x H100, 464 GB pool, 10% headroom, no sharing: 155 / 38 / 19 / 9."""
    assert _node(context_tokens=context, output_tokens=0).max_trajectories_unshared == expected


@pytest.mark.parametrize(("context", "seed", "kvctl"), [
    (8_192, 448, 447), (32_768, 112, 111), (65_536, 56, 55), (131_072, 28, 27)])
def test_seed_003_table_7_b200_cold_rows_round_instead_of_floor(context, seed, kvctl):
    """Table 7 B200 (1,336 GB pool): 0.9 x 1,336e9 / (C x 327,680) = 447.93, 111.98, 55.99, 27.99.

    The seed rounds to 448 / 112 / 56 / 28; a trajectory count is a floor, so kvctl says one less.
    """
    plan = _node(hbm=192 * GB, weights=25 * GB, runtime=0, context_tokens=context, output_tokens=0)
    assert plan.max_trajectories_unshared == kvctl == seed - 1


@pytest.mark.parametrize(("context", "seed", "kvctl"), [
    (8_192, 298, 387), (32_768, 84, 95), (65_536, 44, 47), (131_072, 22, 22)])
def test_seed_003_table_7_sixty_percent_shared_is_not_determined(context, seed, kvctl):
    """Table 7's '60% shared' column does not follow from its stated inputs.

    kvctl's eq. (7) reading (S_shared = 0.6 C held once, 0.4 C private per trajectory) gives
    387 / 95 / 47 / 22 where the seed prints 298 / 84 / 44 / 22; no single sigma or M/K split
    reproduces all four seed values, so the test pins kvctl's numbers.
    """
    plan = _node(context_tokens=context, output_tokens=0, shared_tokens=int(0.6 * context))
    assert plan.max_trajectories_shared == kvctl


@pytest.mark.parametrize(("context", "expected"), [(8_192, 195), (32_768, 48), (131_072, 12)])
def test_seed_003_napkin_0_1_node_of_687_2_gb(context, expected):
    """Napkin 0.1: 687.2 GB (8 x 80 GiB) - 141.2 GB - 20 GB = 526.0 GB: 195 / 48 / 12 trajectories."""
    plan = _node(hbm=80 * GIB, weights=17_650_000_000, runtime=2_500_000_000, headroom=0.0,
                 context_tokens=context, output_tokens=0)
    assert round(plan.split.node_kv_pool_bytes / GB, 1) == 526.0
    assert plan.max_trajectories_unshared == expected


@pytest.mark.parametrize(("context", "expected"), [(8_192, 192), (131_072, 12)])
def test_seed_003_section_1_480_gib_pool(context, expected):
    """Seed 003 section 1: 640 GiB - 140 GiB - 20 GiB = 480 GiB: floor(480 / 2.5) = 192, floor(480 / 40) = 12."""
    plan = _node(hbm=80 * GIB, weights=35 * GIB // 2, runtime=5 * GIB // 2, headroom=0.0,
                 context_tokens=context, output_tokens=0)
    assert plan.split.node_kv_pool_bytes == 480 * GIB
    assert plan.max_trajectories_unshared == expected


def test_eq_6_demand_of_36_trajectories():
    """Eq. (6): 36 x 34,816 x 327,680 B = 410,706,247,680 B, inside the 464 GB pool."""
    d = demand(_node(), trajectories=36)
    assert d.unshared_bytes == 410_706_247_680
    assert d.fits_unshared


def test_eq_7_demand_counts_the_shared_prefix_once_plus_headroom():
    """Eq. (7): (24,576 + 122 x 10,240) x 327,680 + 10% of 464 GB."""
    d = demand(_node(shared_tokens=24_576), trajectories=122)
    assert d.shared_bytes == (24_576 + 122 * 10_240) * M_TOKEN + 46_400_000_000
    assert d.fits_shared


def test_branching_shares_the_root():
    """M_branching = M_root + sum_b S_gen,b m_token: 32,768 + 4 x 2,048 tokens, not 4 x 34,816."""
    b = branching(_node(), branches=4, branch_tokens=2_048)
    assert b.task_tokens == 40_960
    assert b.task_bytes == 40_960 * M_TOKEN
    assert b.task_tokens_without_sharing == 139_264
    assert (b.max_tasks, b.max_tasks_without_sharing) == (31, 9)


def test_littles_law_tool_wait_inflation():
    """N = lambda W: 2 turns/s, 5 s generation, 45 s tool wait: 100 resident retained vs 10 offloaded (10x)."""
    t = tool_wait_concurrency(_node(), arrival_rate=2, generation_seconds=5, tool_wait_seconds=45)
    assert (t.resident_retained, t.resident_offloaded, t.inflation) == (100, 10, 10)
    assert not t.fits_retained and t.fits_offloaded


def test_admission_ceiling_at_tau_high():
    """tau_high = 0.88: floor(0.88 x 1,416,015) = 1,246,093 tokens, 35 unshared trajectories."""
    a = admission_ceiling(_node(), tau_high=0.88)
    assert a.ceiling_tokens_per_replica == 1_246_093
    assert a.trajectories_unshared == 35


def test_two_replicas_hold_their_own_shared_prefix():
    """TP=4 on 8 GPUs is two replicas; each holds the shared prefix and its own trajectories."""
    split = hbm_split(hbm_bytes=80 * GB, weights_bytes=35 * GB, runtime_bytes=4_500_000_000, devices=8)
    plan = plan_capacity(split=split, bytes_per_token=M_TOKEN, bytes_per_token_per_device=M_TOKEN // 4, tp=4,
                         context_tokens=32_768, output_tokens=2_048, shared_tokens=24_576)
    assert plan.replicas == 2
    assert plan.max_trajectories_shared % 2 == 0


def test_no_pool_left_is_rejected():
    """Weights plus runtime above HBM leave no KV pool: one-line InputError."""
    with pytest.raises(InputError, match="leave no KV pool"):
        hbm_split(hbm_bytes=80 * GB, weights_bytes=78 * GB, runtime_bytes=4 * GB, devices=1)


def test_devices_not_a_multiple_of_tp_are_rejected():
    """Six devices cannot form TP=4 replicas."""
    split = hbm_split(hbm_bytes=80 * GB, weights_bytes=10 * GB, runtime_bytes=GB, devices=6)
    with pytest.raises(InputError, match="not a multiple of TP"):
        plan_capacity(split=split, bytes_per_token=M_TOKEN, bytes_per_token_per_device=M_TOKEN // 4, tp=4,
                      context_tokens=1000, output_tokens=0)


def test_shared_prefix_longer_than_context_is_rejected():
    """More shared tokens than context tokens is contradictory."""
    with pytest.raises(InputError, match="exceed context"):
        _node(shared_tokens=40_000)

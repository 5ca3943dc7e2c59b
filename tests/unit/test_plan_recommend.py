"""SGLang launch-flag rules (kvctl's rules on seed 000 0x02G/0x09B and seed 003)."""

import pytest

from kvctl.sizing.plan.capacity import hbm_split, plan_capacity
from kvctl.sizing.plan.capacity_workload import admission_ceiling
from kvctl.sizing.plan.recommend import recommend
from kvctl.sizing.plan.retention import TierCost

pytestmark = pytest.mark.unit

GB = 10**9
M_TOKEN = 327_680


def _advice(shared=24_576, wait=45.0, context=32_768, host_budget=None):
    """Napkin 0.7's node (8x80 GB, TP=8) with H100-like rates and a 512 GB/s host tier."""
    split = hbm_split(hbm_bytes=80 * GB, weights_bytes=17_500_000_000, runtime_bytes=4_500_000_000, devices=8)
    plan = plan_capacity(split=split, bytes_per_token=M_TOKEN, bytes_per_token_per_device=M_TOKEN // 8, tp=8,
                         context_tokens=context, output_tokens=2_048, shared_tokens=shared)
    reload = context * M_TOKEN / 512e9
    host = TierCost(name="host", storage=False, bandwidth_bytes_per_s=512e9, reload_seconds=reload,
                    round_trip_seconds=2 * reload, break_even_seconds=2 * reload, speedup_vs_recompute=62.0)
    return recommend(plan=plan, admission=admission_ceiling(plan, tau_high=0.88), host_tier=host,
                     params=70e9, peak_flops_per_device=989.4e12, weight_stream_seconds=17.5e9 / 3.35e12,
                     tool_wait_seconds=wait, generation_seconds=5.0, host_budget_bytes=host_budget)


def _flag(advice, name):
    return next(a.value for a in advice.flags if a.flag == name)


def test_mem_fraction_leaves_the_runtime_reserve():
    """f = (80 - 4.5) / 80 = 0.94375, rounded down to 0.943; SGLang's pool = 80 x f - 17.5 GB."""
    advice = _advice()
    assert advice.mem_fraction_static == 0.943
    assert _flag(advice, "--mem-fraction-static") == "0.943"


def test_page_size_is_the_largest_within_the_waste_budget():
    """(P-1)/2 <= 1% of 10,240 private tokens allows P=64; 1% of 512 + 2,048 = 25.6 allows 32, not 64."""
    assert _advice().page_size == 64
    assert _advice(shared=0, context=512).page_size == 32


def test_shared_prefix_selects_slru():
    """A prefix shared by every trajectory selects slru; none selects lru."""
    assert _flag(_advice(), "--radix-eviction-policy") == "slru"
    assert _flag(_advice(shared=0), "--radix-eviction-policy") == "lru"


def test_max_running_requests_is_the_admission_ceiling():
    """floor(0.88 x 1,416,015) = 1,246,093 tokens: (1,246,093 - 24,576) // 10,240 = 119 trajectories."""
    assert _advice().max_running_requests == 119


def test_chunk_keeps_the_mixed_iteration_within_the_itl_target():
    """The chosen chunk's mixed iteration fits 50 ms; doubling it would not."""
    advice = _advice()
    per_token = 2 * 70e9 / (8 * 989.4e12 * 0.6)
    assert advice.mixed_iteration_seconds <= 0.05
    assert (2 * advice.chunked_prefill_size + advice.max_running_requests) * per_token > 0.05


def test_long_tool_waits_enable_hicache_sized_by_littles_law():
    """45 s waits vs 5 s turns park ceil(119 x 9) = 1,071 trajectories of 10,240 tokens x 40 KiB per GPU."""
    advice = _advice()
    assert advice.hicache_enabled
    assert advice.hicache_host_bytes_per_device == 1_071 * 10_240 * 40_960
    assert "--enable-hierarchical-cache" in advice.launch_args


def test_host_budget_caps_hicache():
    """A 100 GB host budget caps the HiCache size."""
    assert _advice(host_budget=100 * GB).hicache_host_bytes_per_device == 100 * GB


def test_short_tool_waits_keep_state_resident():
    """A 10 ms wait is below the 42 ms break-even: no HiCache flag in the launch line."""
    advice = _advice(wait=0.01)
    assert not advice.hicache_enabled
    assert "--enable-hierarchical-cache" not in advice.launch_args

"""Retain / offload / recompute / tier (seed 003 sec. 6: Figure 10, napkin math 0.6, pitfall)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.plan.links import retention_tiers
from kvctl.sizing.plan.retention import Decision, Tier, ToolClass, plan_retention

pytestmark = pytest.mark.unit

M_TOKEN = 327_680  # seed 003 eq. (1): 2 * 80 * 8 * 128 * 2 bytes
GIB = 2**30


def _plan(context, *, link=50e9, params=70e9, rate=4e14, tools=(), **extra):
    tiers = (Tier(name="host", storage=False, bandwidth_bytes_per_s=link),
             Tier(name="NVMe", storage=True, bandwidth_bytes_per_s=7e9))
    return plan_retention(context_tokens=context, bytes_per_token=M_TOKEN, params=params,
                          prefill_flops=rate, tiers=tiers, tools=tools, **extra)


def test_seed_003_figure_10_break_even_215_ms():
    """Figure 10: 16,384 tokens = 5.0 GiB; recompute 5.735 s; round trip = T* = 215 ms at 50 GB/s."""
    plan = _plan(16_384)
    host = plan.tiers[0]
    assert plan.kv_bytes == 5 * GIB
    assert plan.recompute_seconds == pytest.approx(5.7344, rel=1e-12)
    assert round(host.round_trip_seconds * 1e3) == 215
    assert host.break_even_seconds == host.round_trip_seconds


def test_seed_003_figure_10_advantage_is_53_4x_not_53_6x():
    """Seed says 53.6x; 5.7344 s / 107.37 ms = 53.41x. The seed divided by a reload rounded to 107 ms."""
    host = _plan(16_384).tiers[0]
    assert round(host.reload_seconds * 1e3, 2) == 107.37
    assert round(host.speedup_vs_recompute, 2) == 53.41


def test_seed_003_pitfall_11_5_s_versus_215_ms():
    """Pitfall: 32,768 tokens (10 GiB): recompute 11.5 s at 4e14 FLOP/s; reload 215 ms each way; 430 ms round trip; ~53x."""
    plan = _plan(32_768)
    host = plan.tiers[0]
    assert plan.kv_bytes == 10 * GIB
    assert round(plan.recompute_seconds, 1) == 11.5
    assert round(host.reload_seconds * 1e3) == 215
    assert round(host.round_trip_seconds * 1e3) == 429  # the seed rounds 2 x 215 = 430
    assert int(host.speedup_vs_recompute) == 53


def test_ratio_does_not_depend_on_context_length():
    """Seed 003: reload/recompute = m_token R / (2 P B), the same at 1k and 64k tokens."""
    assert _plan(1024).tiers[0].speedup_vs_recompute == pytest.approx(
        _plan(65_536).tiers[0].speedup_vs_recompute, rel=1e-12)


def _napkin_0_6(efficiency=1.0):
    """Napkin 0.6: 32,768 tokens on 8 accelerators with 64 GB/s links each, 70.6B params, 3,560 TFLOP/s."""
    tiers = retention_tiers(devices=8, primary_link="pcie-gen5", efficiency=efficiency)
    return plan_retention(context_tokens=32_768, bytes_per_token=M_TOKEN, params=70.6e9,
                          prefill_flops=3.56e15, tiers=tiers,
                          tools=(ToolClass(name="integration-suite", typical_wait_seconds=45),))


def test_seed_003_napkin_0_6_reload_and_round_trip():
    """Napkin 0.6: 10.7 GB over 512 GB/s reloads in about 21 ms; the round trip is 42 ms."""
    plan = _napkin_0_6()
    host = plan.tiers[0]
    assert round(plan.kv_bytes / 1e9, 1) == 10.7
    assert host.bandwidth_bytes_per_s == 512e9
    assert round(host.reload_seconds * 1e3) == 21
    assert round(host.round_trip_seconds * 1e3) == 42


def test_seed_003_napkin_0_6_recompute_and_advantage():
    """Napkin 0.6: 2 x 70.6e9 x 32,768 = 4.63e15 FLOPs take 1.3 s; reload is about 62x faster."""
    plan = _napkin_0_6()
    assert round(plan.recompute_seconds, 1) == 1.3
    assert round(plan.tiers[0].speedup_vs_recompute) == 62


def test_seed_003_napkin_0_6_holding_costs_483_gb_s():
    """Napkin 0.6: holding 10.7 GB for 45 s withholds about 483 GB.s; the decision is to offload."""
    (decision,) = _napkin_0_6().decisions
    assert round(decision.hold_cost_byte_seconds / 1e9) == 483
    assert decision.decision is Decision.OFFLOAD


def test_seed_003_napkin_0_6_quarter_bandwidth_still_wins_15x():
    """Napkin 0.6: at a quarter of rated link bandwidth reload still wins by about 15x."""
    assert int(_napkin_0_6(efficiency=0.25).tiers[0].speedup_vs_recompute) == 15


def test_seed_003_nvlink_c2c_break_even_is_sub_20_ms():
    """Seed 003: NVLink-C2C collapses T* for the 5 GiB state into the sub-20-millisecond realm."""
    tiers = retention_tiers(devices=1, primary_link="nvlink-c2c")
    plan = plan_retention(context_tokens=16_384, bytes_per_token=M_TOKEN, params=70e9,
                          prefill_flops=4e14, tiers=tiers)
    assert plan.tiers[0].break_even_seconds < 0.020


def test_shadow_prices_scale_the_break_even():
    """T* = T_rt mu_HBM / (mu_HBM - mu_DRAM) + dT_stall: ratio 0.5 doubles it, stall adds on."""
    base = _plan(16_384).tiers[0].break_even_seconds
    priced = _plan(16_384, dram_price_ratio=0.5, stall_seconds=0.1).tiers[0].break_even_seconds
    assert priced == pytest.approx(2 * base + 0.1, rel=1e-12)


def test_short_wait_retains():
    """A 20 ms lint call is shorter than the 215 ms round trip: retain."""
    (d,) = _plan(16_384, tools=(ToolClass(name="lint", typical_wait_seconds=0.02),)).decisions
    assert d.decision is Decision.RETAIN


def test_long_wait_tiers_to_nvme_when_it_still_beats_recompute():
    """A 10-minute approval parks on NVMe: 767 ms reload still beats the 5.7 s recompute."""
    (d,) = _plan(16_384, tools=(ToolClass(name="approval", typical_wait_seconds=600),)).decisions
    assert d.decision is Decision.TIER
    assert d.tier == "NVMe"


def test_slow_link_recomputes():
    """When reload over the link is slower than recompute, drop the state and recompute."""
    (d,) = _plan(16_384, link=0.5e9, tools=(ToolClass(name="build", typical_wait_seconds=30),)).decisions
    assert d.decision is Decision.RECOMPUTE


def test_min_wait_decides_offload_feasibility():
    """Offload must complete inside the shortest wait: a 0.1 s minimum keeps the state resident."""
    tool = ToolClass(name="api", typical_wait_seconds=3, min_wait_seconds=0.1)
    (d,) = _plan(16_384, tools=(tool,)).decisions
    assert d.decision is Decision.RETAIN


def test_price_ratio_of_one_is_rejected():
    """mu_DRAM = mu_HBM makes T* infinite; the ratio must be below 1."""
    with pytest.raises(InputError, match="shadow price"):
        _plan(16_384, dram_price_ratio=1.0)

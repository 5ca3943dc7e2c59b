"""Token-budget iteration time, TTFT and ITL (seed 003 napkin math 0.5)."""

import pytest

from kvctl.errors import InputError
from kvctl.sizing.plan.chunked_prefill import plan_chunked_prefill

pytestmark = pytest.mark.unit


def _napkin_0_5(**overrides):
    """800 TFLOPS, 3.0 TB/s, 70B params in 16-bit (140 GB), 32 decode streams, 4,096-token prompt, C=512."""
    inputs = dict(params=70e9, weight_bytes=140e9, peak_flops=800e12, memory_bandwidth=3e12,
                  decode_batch=32, prompt_tokens=4096, chunk_tokens=512)
    inputs.update(overrides)
    return plan_chunked_prefill(**inputs)


def test_seed_003_napkin_0_5_decode_iteration():
    """Napkin 0.5 Q1: weights stream in 46.7 ms, decode compute 11.2 ms: memory-bound, ITL 46.7 ms."""
    plan = _napkin_0_5()
    assert plan.weight_stream_seconds == pytest.approx(140 / 3000, rel=1e-12)
    assert round(plan.weight_stream_seconds * 1e3, 1) == 46.7
    assert plan.decode_compute_seconds == pytest.approx(0.0112, rel=1e-12)
    assert plan.decode_bound == "memory"
    assert plan.decode_iteration_seconds == plan.weight_stream_seconds


def test_seed_003_napkin_0_5_monolithic_prefill():
    """Napkin 0.5 Q1: 573.44 TFLOPs at 480 TFLOPS = 1,194.7 ms, a 25.6x ITL degradation."""
    plan = _napkin_0_5()
    assert plan.monolithic_prefill_seconds == pytest.approx(573.44 / 480, rel=1e-12)
    assert round(plan.monolithic_prefill_seconds * 1e3, 1) == 1194.7
    assert round(plan.monolithic_itl_degradation, 1) == 25.6


def test_seed_003_napkin_0_5_chunked_iteration():
    """Napkin 0.5 Q2: 8 chunks of 512 + 32 = 544 tokens, 76.16 TFLOPs at 480 TFLOPS = 158.7 ms."""
    plan = _napkin_0_5()
    assert plan.chunks == 8
    assert plan.token_budget == 544
    assert plan.chunk_iteration_seconds == pytest.approx(76.16 / 480, rel=1e-12)
    assert round(plan.chunk_iteration_seconds * 1e3, 1) == 158.7
    assert plan.chunk_iteration_bound == "compute"
    assert plan.chunked_max_itl_seconds == plan.chunk_iteration_seconds


def test_seed_003_chunked_ttft_increase_is_within_table_5_band():
    """TTFT = sum of the 8 iterations = 1,269.3 ms, +6.25% over monolithic (Table 5: 5-15%)."""
    plan = _napkin_0_5()
    assert plan.chunked_ttft_seconds == pytest.approx(8 * 76.16 / 480, rel=1e-12)
    assert plan.chunked_ttft_seconds / plan.monolithic_prefill_seconds == pytest.approx(1.0625, rel=1e-12)


def test_short_last_chunk_is_charged_its_own_size():
    """A 4,100-token prompt takes 9 iterations; the last carries 4 prefill + 32 decode tokens."""
    plan = _napkin_0_5(prompt_tokens=4100)
    assert plan.chunks == 9
    assert plan.chunked_ttft_seconds == pytest.approx(8 * 76.16 / 480 + 140 / 3000, rel=1e-12)


def test_balanced_chunk_matches_weight_streaming():
    """t_comp(C + 32) = 46.7 ms at 480 TFLOPS gives C + 32 = 160: a 128-token chunk balances."""
    assert _napkin_0_5().balanced_chunk_tokens == 128


def test_mfu_above_one_is_rejected():
    """An MFU of 1.5 is not a utilization."""
    with pytest.raises(InputError, match="prefill MFU"):
        _napkin_0_5(prefill_mfu=1.5)

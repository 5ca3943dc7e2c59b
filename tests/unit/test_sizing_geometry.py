"""Bytes per token / rank / trajectory from ModelGeometry (kvctl.sizing.geometry)."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.sizing.geometry import ModelGeometry

pytestmark = pytest.mark.unit


def make(**overrides) -> ModelGeometry:
    """A small GQA model: 4 layers, 16 query / 4 KV heads of 64, bf16, 4,096-token window."""
    fields = dict(name="tiny", num_layers=4, hidden_size=1024, num_attention_heads=16,
                  num_kv_heads=4, head_dim=64, v_head_dim=64, attention="gqa", max_context=4096)
    fields.update(overrides)
    return ModelGeometry(**fields)


def test_gqa_bytes_per_token_is_2_l_hkv_d_b():
    """Seed 003 eq. (1): 2 x 4 layers x 4 heads x 64 x 2 bytes = 4,096 B."""
    assert make().model_bytes_per_token() == 4_096


def test_tp_splits_kv_heads():
    """TP=2 leaves 2 of 4 KV heads per rank: half the bytes."""
    geometry = make()
    assert geometry.kv_heads_per_rank(2) == 2
    assert geometry.bytes_per_token(tp=2) == 2_048


def test_tp_not_dividing_kv_heads_is_an_input_error():
    """6 KV heads cannot split over TP=4 (SGLang's divide() would assert)."""
    with pytest.raises(InputError, match="TP=4 does not divide tiny's 6 KV heads"):
        make(num_attention_heads=24, num_kv_heads=6).bytes_per_token(tp=4)


def test_tp_not_dividing_query_heads_is_an_input_error():
    """TP=3 cannot split 16 query heads."""
    with pytest.raises(InputError, match="query heads"):
        make().kv_heads_per_rank(3)


def test_tp_beyond_kv_heads_replicates_one_head_per_rank():
    """TP=8 over 4 KV heads: each rank holds 1 replicated head (SGLang's num_kv_head_replicas)."""
    geometry = make()
    assert geometry.kv_heads_per_rank(8) == 1
    assert geometry.bytes_per_token(tp=8) == 1_024


def test_tp_beyond_kv_heads_must_be_a_multiple():
    """TP=8 over 3 KV heads cannot replicate evenly."""
    with pytest.raises(InputError, match="cannot replicate"):
        make(num_attention_heads=24, num_kv_heads=3).kv_heads_per_rank(8)


def test_mqa_is_replicated_not_split():
    """One KV head: every TP rank stores the whole row."""
    geometry = make(num_kv_heads=1, attention="mqa")
    assert geometry.bytes_per_token(tp=4) == geometry.model_bytes_per_token() == 1_024


def test_mla_caches_latent_rows_replicated_across_tp():
    """MLA: (kv_lora_rank + qk_rope_head_dim) x layers x bytes, the same on every TP rank."""
    geometry = make(attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, num_kv_heads=16)
    assert geometry.model_bytes_per_token() == 576 * 4 * 2
    assert geometry.bytes_per_token(tp=8) == 576 * 4 * 2


def test_different_k_and_v_head_dims():
    """K 192 and V 128 wide: 4 layers x 4 heads x (192 + 128) x 2 bytes."""
    assert make(head_dim=192, v_head_dim=128).model_bytes_per_token() == 4 * 4 * 320 * 2


@pytest.mark.parametrize(
    ("kv_dtype", "expected"), [("fp32", 8_192), ("fp8", 2_048), ("fp4", 1_024)]
)
def test_kv_dtype_scales_the_row(kv_dtype, expected):
    """--kv-dtype overrides the model's dtype; fp4 packs two elements per byte."""
    assert make().model_bytes_per_token(kv_dtype) == expected


def test_pipeline_stages_follow_sglang_get_pp_indices():
    """10 layers over PP=4: the last two stages take the extra layers (2, 2, 3, 3)."""
    stages = make(num_layers=10).pipeline_stages(4)
    assert [len(stage) for stage in stages] == [2, 2, 3, 3]
    assert stages[-1] == range(7, 10)


def test_pp_per_rank_bytes_are_the_busiest_stage():
    """Per-rank bytes under PP are those of the stage holding the most layers (3 of 10)."""
    assert make(num_layers=10).bytes_per_token(pp=4) == 3 * 1_024


def test_pp_beyond_layers_is_an_input_error():
    """PP cannot exceed the layer count."""
    with pytest.raises(InputError, match="PP=5 exceeds"):
        make().pipeline_stages(5)


def test_trajectory_bytes_is_context_times_row_without_windows():
    """M_KV = S x m_token (seed 003 section 1)."""
    assert make().trajectory_bytes(1_000) == 1_000 * 4_096


def test_sliding_window_caps_every_sliding_layer():
    """All layers sliding over 512 tokens: a 4,096-token sequence holds 512 rows per layer."""
    geometry = make(sliding_window=512, layer_types=("sliding",) * 4)
    assert geometry.trajectory_bytes(4_096) == 512 * 4_096
    assert geometry.trajectory_bytes_uncapped(4_096) == 4_096 * 4_096


def test_hybrid_pattern_caps_only_sliding_layers():
    """Alternating sliding/global layers: 2 layers hold min(S, W), 2 hold S."""
    geometry = make(sliding_window=512, layer_types=("sliding", "full", "sliding", "full"))
    per_layer = 4 * 64 * 2 * 2
    assert geometry.trajectory_bytes(2_048) == (2 * 512 + 2 * 2_048) * per_layer
    assert geometry.trajectory_bytes(256) == 4 * 256 * per_layer


def test_context_beyond_window_is_an_input_error():
    """A context longer than max_position_embeddings is refused, naming the window."""
    with pytest.raises(InputError, match="exceeds tiny's window of 4,096 tokens"):
        make().trajectory_bytes(4_097)


def test_non_positive_context_is_an_input_error():
    """Context 0 is refused."""
    with pytest.raises(InputError, match="context must be a positive integer"):
        make().trajectory_bytes(0)


def test_sliding_layers_without_window_are_rejected():
    """A sliding layer needs a window."""
    with pytest.raises(InputError, match="sliding layers need a sliding_window"):
        make(layer_types=("sliding",) * 4)


def test_layer_types_default_to_full():
    """Without a pattern every layer is full attention."""
    assert make().layer_types == ("full",) * 4

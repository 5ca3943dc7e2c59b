"""kvctl's bytes per token equal SGLang 0.5.23's own cell_size, computed by SGLang's code.

For each real config.json under tests/fixtures/configs (plus a K != V head-dim variant),
the test publishes SGLang's runtime context with that TP size, builds SGLang's ModelConfig
from the fixture directory and a real KVCacheConfigurator around it (CPU, no weights),
asks `create_memory_pool_configurator` for the pool configurator a server would use, and
compares its `_cell_size` (from `DefaultPoolConfigurator._compute_cell_size`) with
`ModelGeometry.bytes_per_token`. It also checks that kvctl's pool token count equals
SGLang's `calculate_pool_sizes` for the same byte budget and page size. kvctl itself
never imports sglang; only this test does.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from kvctl.sizing import pool
from kvctl.sizing.models import resolve_model

pytestmark = pytest.mark.integration

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"

# (fixture, TP, SGLang --kv-cache-dtype, kvctl --kv-dtype)
CASES = [
    ("llama-3-8b", 1, "auto", None),
    ("llama-3-8b", 2, "auto", None),
    ("llama-3.1-70b", 8, "auto", None),
    ("llama-3.1-405b", 8, "fp8_e4m3", "fp8_e4m3"),
    ("llama-2-7b", 4, "auto", None),  # MHA, fp16 checkpoint
    ("qwen2.5-7b", 4, "auto", None),
    ("qwen2.5-72b", 8, "bf16", "bf16"),
    ("qwen3-8b", 2, "fp8_e4m3", "fp8_e4m3"),
    ("mistral-7b-v0.1", 1, "auto", None),  # sliding window on every layer
    ("mixtral-8x7b", 2, "auto", None),
    ("deepseek-v2-lite", 1, "auto", None),  # MLA
    ("deepseek-v2-lite", 4, "auto", None),  # MLA, latent replicated over TP
    ("deepseek-v3", 8, "auto", None),  # MLA, FP8 weights, bf16 KV
    ("gemma-2-9b", 2, "auto", None),  # hybrid sliding/global, float32 config served as bf16
    ("gemma-2b", 2, "auto", None),  # MQA, one KV head replicated over TP
]


@pytest.fixture(scope="module")
def sglang_cell_size():
    """A function (model_dir, tp, kv_cache_dtype) -> (SGLang cell_size, pool configurator)."""
    pytest.importorskip("sglang")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU-only quantization backends warn at import
        from sglang.srt import runtime_context as rtc
        from sglang.srt.configs.model_config import AttentionArch, ModelConfig
        from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
        from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype
        from sglang.srt.model_executor.model_runner_components.layer_setup import ModelLayerInfo
        from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
            SpecAuxHiddenStateConfig,
        )
        from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    def compute(model_dir: Path, tp: int, kv_cache_dtype: str):
        server_args = ServerArgs(model_path=str(model_dir), device="cpu", skip_tokenizer_init=True,
                                 tp_size=tp, kv_cache_dtype=kv_cache_dtype)
        rtc.publish(server_args, role="scheduler")
        model_config = ModelConfig(str(model_dir))
        dtype_str, kv_dtype = configure_kv_cache_dtype(
            server_args_kv_cache_dtype=kv_cache_dtype, model=None, model_dtype=model_config.dtype,
            is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None,
        )
        layers = model_config.num_hidden_layers
        kvc = KVCacheConfigurator(
            device="cpu", gpu_id=0, attn_dp_size=1, pp_size=1, pp_group=None, model=None,
            model_config=model_config, server_args=server_args, kv_cache_dtype=kv_dtype,
            kv_cache_dtype_str=dtype_str or kv_cache_dtype, model_dtype=model_config.dtype,
            page_size=1, sliding_window_size=None, spec_algorithm=SpeculativeAlgorithm.NONE,
            is_draft_worker=False, post_capture_kv_active=False,
            spec_aux_config=SpecAuxHiddenStateConfig(), is_hybrid_swa=model_config.is_hybrid_swa,
            is_hybrid_swa_compress=False,
            use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
            layer_info=ModelLayerInfo(start_layer=0, end_layer=layers, num_effective_layers=layers),
            forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None,
            memory_pool_config=None,
        )
        configurator = create_memory_pool_configurator(kvc)
        return configurator._cell_size, configurator

    return compute


@pytest.mark.parametrize(("fixture", "tp", "sglang_dtype", "kvctl_dtype"), CASES,
                         ids=[f"{c[0]}-tp{c[1]}-{c[2]}" for c in CASES])
def test_bytes_per_token_equals_sglang_cell_size(
    sglang_cell_size, fixture, tp, sglang_dtype, kvctl_dtype
):
    """kvctl's per-rank bytes per token equal SGLang's _compute_cell_size for the same config."""
    cell_size, _ = sglang_cell_size(CONFIGS / fixture, tp, sglang_dtype)
    assert resolve_model(str(CONFIGS / fixture)).bytes_per_token(kvctl_dtype, tp=tp) == cell_size


def test_different_k_and_v_head_dims_match_sglang(sglang_cell_size, tmp_path):
    """A Llama-3-8B variant with v_head_dim 64 (K 128): SGLang and kvctl agree on K + V."""
    config = json.loads((CONFIGS / "llama-3-8b" / "config.json").read_text())
    config["v_head_dim"] = 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    cell_size, _ = sglang_cell_size(tmp_path, 2, "auto")
    assert cell_size == 32 * 4 * (128 + 64) * 2
    assert resolve_model(str(tmp_path)).bytes_per_token(tp=2) == cell_size


@pytest.mark.parametrize(
    ("fixture", "budget_gib", "page_size"),
    [("llama-3.1-70b", 61.24, 16), ("deepseek-v3", 45.96, 64), ("gemma-2b", 7.5, 1)],
)
def test_pool_tokens_equal_sglang_calculate_pool_sizes(
    sglang_cell_size, fixture, budget_gib, page_size
):
    """(budget - overhead) // cell // page * page: kvctl's count equals SGLang's configurator's."""
    tp = 8 if fixture != "gemma-2b" else 1
    _, configurator = sglang_cell_size(CONFIGS / fixture, tp, "auto")
    budget = int(budget_gib * 2**30)
    sglang_tokens = configurator.calculate_pool_sizes(budget, page_size).max_total_num_tokens
    kvctl_cell = resolve_model(str(CONFIGS / fixture)).bytes_per_token(tp=tp)
    assert pool.pool_tokens(budget, kvctl_cell, page_size) == sglang_tokens


"""Presets and HF config.json loading (kvctl.sizing.models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvctl.errors import InputError
from kvctl.sizing.models import PRESETS, load_config_file, presets_with_same_kv, resolve_model

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "fixtures" / "configs"
PRESET_TABLE = json.loads((REPO / "kvctl" / "sizing" / "data" / "presets.json").read_text())


@pytest.mark.parametrize("name", sorted(PRESET_TABLE))
def test_preset_matches_its_checkpoint_config_fixture(name):
    """Each preset parses to the same geometry as its checkpoint's config.json fixture."""
    preset = PRESETS[name]
    from_file = load_config_file(REPO / PRESET_TABLE[name]["fixture"])
    assert from_file.num_layers == preset.num_layers
    assert (from_file.num_kv_heads, from_file.head_dim, from_file.v_head_dim) == (
        preset.num_kv_heads, preset.head_dim, preset.v_head_dim)
    assert from_file.layer_types == preset.layer_types
    assert from_file.model_bytes_per_token() == preset.model_bytes_per_token()
    assert from_file.num_params == preset.num_params


# (preset, attention, layers, KV heads, K head_dim, bytes/token bf16 model-wide, window)
# from the public config.json of each checkpoint.
GEOMETRY = [
    ("Llama-3-8B", "gqa", 32, 8, 128, 131_072, 8_192),
    ("Llama-3-70B", "gqa", 80, 8, 128, 327_680, 8_192),
    ("Llama-3.1-70B", "gqa", 80, 8, 128, 327_680, 131_072),
    ("Llama-3.1-405B", "gqa", 126, 8, 128, 516_096, 131_072),
    ("Llama-2-7B", "mha", 32, 32, 128, 524_288, 4_096),
    ("Qwen2.5-7B", "gqa", 28, 4, 128, 57_344, 131_072),
    ("Qwen2.5-72B", "gqa", 80, 8, 128, 327_680, 131_072),
    ("Qwen3-8B", "gqa", 36, 8, 128, 147_456, 40_960),
    ("Mistral-7B", "gqa", 32, 8, 128, 131_072, 32_768),
    ("Mixtral-8x7B", "gqa", 32, 8, 128, 131_072, 32_768),
    ("DeepSeek-V2-Lite", "mla", 27, 16, 192, 31_104, 163_840),
    ("DeepSeek-V3", "mla", 61, 128, 192, 70_272, 163_840),
    ("Gemma-2-9B", "gqa", 42, 8, 256, 344_064, 8_192),
    ("Gemma-2B", "mqa", 18, 1, 256, 18_432, 8_192),
]


@pytest.mark.parametrize(
    ("name", "attention", "layers", "kv", "head_dim", "row", "window"), GEOMETRY
)
def test_preset_geometry(name, attention, layers, kv, head_dim, row, window):
    """Presets carry their checkpoints' real geometry and bf16 bytes per token."""
    g = PRESETS[name]
    assert (g.attention, g.num_layers) == (attention, layers)
    assert (g.num_kv_heads, g.head_dim) == (kv, head_dim)
    assert g.model_bytes_per_token("bf16") == row
    assert g.max_context == window


# Total parameters as published for each checkpoint (safetensors totals on the model cards).
PARAMS = [
    ("Llama-3-8B", 8_030_261_248), ("Llama-3-70B", 70_553_706_496),
    ("Llama-3.1-405B", 405_853_388_800), ("Llama-2-7B", 6_738_415_616),
    ("Qwen2.5-7B", 7_615_616_512), ("Qwen2.5-72B", 72_706_203_648),
    ("Qwen3-8B", 8_190_735_360), ("Mistral-7B", 7_241_732_096),
    ("Mixtral-8x7B", 46_702_792_704), ("DeepSeek-V2-Lite", 15_706_484_224),
    ("Gemma-2-9B", 9_241_705_984), ("Gemma-2B", 2_506_172_416),
]


@pytest.mark.parametrize(("name", "params"), PARAMS)
def test_parameter_count_matches_published_total(name, params):
    """Parameters counted from the config equal the published totals exactly."""
    assert PRESETS[name].num_params == params


def test_deepseek_v3_counts_main_model_without_mtp():
    """DeepSeek-V3: 671.0B in the 61 main layers (the 14B MTP module is not served by default)."""
    assert round(PRESETS["DeepSeek-V3"].num_params / 1e9, 1) == 671.0


def test_deepseek_v3_stores_fp8_weights_and_bf16_kv():
    """An FP8 checkpoint: fp8 weights; the served (default KV) dtype stays bf16."""
    g = PRESETS["DeepSeek-V3"]
    assert (g.weight_dtype, g.dtype) == ("fp8", "bf16")


def test_gemma_2_alternates_sliding_and_global_layers():
    """Gemma-2: even layers slide over 4,096 tokens, odd layers are global; served in bf16."""
    g = PRESETS["Gemma-2-9B"]
    assert g.layer_types[:4] == ("sliding", "full", "sliding", "full")
    assert (g.num_sliding_layers, g.sliding_window, g.dtype) == (21, 4_096, "bf16")


def test_mistral_v0_1_slides_on_every_layer():
    """Mistral-7B-v0.1: sliding_window 4,096 on all 32 layers."""
    g = PRESETS["Mistral-7B"]
    assert (g.num_sliding_layers, g.sliding_window) == (32, 4_096)


def test_qwen_sliding_window_off_when_use_sliding_window_false():
    """Qwen2.5 declares sliding_window but use_sliding_window: false, so no layer slides."""
    assert PRESETS["Qwen2.5-7B"].sliding_window is None


def test_resolve_is_case_insensitive_and_accepts_repo_names():
    """Presets resolve by name in any case and by Hugging Face repo id."""
    assert resolve_model("llama-3.1-70b") is PRESETS["Llama-3.1-70B"]
    assert resolve_model("mistralai/Mistral-7B-v0.1") is PRESETS["Mistral-7B"]


def test_resolve_directory_and_file(tmp_path):
    """A directory holding config.json and the file itself give the same geometry."""
    from_dir = resolve_model(str(CONFIGS / "qwen3-8b"))
    from_file = resolve_model(str(CONFIGS / "qwen3-8b" / "config.json"))
    assert from_dir == from_file
    assert from_dir.name == "qwen3-8b"


def test_unknown_preset_names_closest():
    """An unknown name lists the closest presets."""
    with pytest.raises(InputError, match="closest presets: Llama-3-70B"):
        resolve_model("llama3-70b")


def test_directory_without_config_is_an_input_error(tmp_path):
    """A directory with no config.json is refused, naming the directory."""
    with pytest.raises(InputError, match="directory has no config.json"):
        resolve_model(str(tmp_path))


def test_missing_file_is_an_input_error(tmp_path):
    """A path that does not exist names the file."""
    missing = tmp_path / "nope" / "config.json"
    with pytest.raises(InputError, match="cannot read"):
        resolve_model(str(missing))


def test_malformed_json_names_file_and_position(tmp_path):
    """Malformed JSON names the file, line and column."""
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": 2,\n  "hidden_size": }')
    with pytest.raises(InputError, match=r"config.json: malformed JSON at line 2 column 18"):
        resolve_model(str(path))


def test_missing_key_names_file_and_key(tmp_path):
    """A config without the layer count names the missing key."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4,
                                "max_position_embeddings": 128}))
    with pytest.raises(InputError, match="missing 'num_hidden_layers'"):
        resolve_model(str(path))


def test_non_object_json_is_an_input_error(tmp_path):
    """A JSON list is not a config."""
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object"):
        resolve_model(str(path))


def test_negative_size_in_config_is_an_input_error(tmp_path):
    """A non-positive head count is refused, naming the key."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64,
                                "num_attention_heads": -4, "max_position_embeddings": 128}))
    with pytest.raises(InputError, match="num_attention_heads must be a positive integer"):
        resolve_model(str(path))


def test_multi_query_flag_means_one_kv_head(tmp_path):
    """GPTBigCode/Falcon-style `multi_query: true` is MQA."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"n_layer": 2, "n_embd": 256, "n_head": 4, "multi_query": True,
                                "n_positions": 2048, "vocab_size": 100}))
    g = resolve_model(str(path))
    assert (g.attention, g.num_kv_heads, g.head_dim) == ("mqa", 1, 64)


def test_text_config_of_a_multimodal_wrapper(tmp_path):
    """A multimodal config's language model lives under text_config."""
    inner = json.loads((CONFIGS / "llama-3-8b" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["Wrapper"], "text_config": inner}))
    assert resolve_model(str(path)).model_bytes_per_token() == 131_072


def test_presets_with_same_kv_point_to_the_long_context_twin():
    """Llama-3-70B's rows with a 131,072-token window: Llama-3.1-70B."""
    assert presets_with_same_kv(PRESETS["Llama-3-70B"], 131_072) == ("Llama-3.1-70B",)

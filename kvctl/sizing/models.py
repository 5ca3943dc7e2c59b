"""Model geometry from a preset name, a local HF `config.json`, or a directory holding one.

Presets are real `config.json` contents (kvctl/sizing/data/presets.json, one entry per
public checkpoint, its Hugging Face repo named) parsed by the same code as a user's file,
so a preset and the checkpoint's own config give the same geometry by construction.

How a config maps to geometry (the keys SGLang 0.5.23's ModelConfig reads):
- KV heads: `num_key_value_heads` (or `num_kv_heads`, `n_head_kv`); `multi_query: true`
  means one; absent means MHA (as many as the query heads).
- `head_dim`, else hidden_size // num_attention_heads; `v_head_dim`, else head_dim.
- MLA when `kv_lora_rank` is set: the cached row is kv_lora_rank + qk_rope_head_dim.
- Sliding windows: `layer_types` when present; Gemma-2 alternates (even layers slide);
  Gemma-3 makes every `sliding_window_pattern`-th layer global; Qwen2 slides only with
  `use_sliding_window: true` and from `max_window_layers` on; otherwise a `sliding_window`
  applies to every layer (Mistral-7B-v0.1). A window >= the context limit never caps.
- Dtypes: SGLang's `--dtype auto` rule (dtypes.served_dtype); FP8-quantized checkpoints
  (`quantization_config.quant_method == "fp8"`) store fp8 weights.
- `num_params`: counted from the config (embeddings, attention, MLP or MoE experts, norms)
  for Llama/Mistral/Qwen/Gemma/Mixtral/DeepSeek layouts; checked against published counts
  in tests/unit/test_sizing_models.py. A checkpoint's extra MTP layers are not counted.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from kvctl.errors import InputError
from kvctl.sizing.dtypes import served_dtype
from kvctl.sizing.geometry import LayerKind, ModelGeometry

_PRESET_FILE = Path(__file__).with_name("data") / "presets.json"


def geometry_from_config(config: Any, *, name: str, source: str) -> ModelGeometry:
    """Parse one HF config dict into a ModelGeometry.

    Raises InputError naming `source` and the problem (missing key, wrong type, bad value).
    """
    if not isinstance(config, dict):
        raise InputError(f"{source}: expected a JSON object, found {type(config).__name__}")
    text = config
    if isinstance(config.get("text_config"), dict) and "num_hidden_layers" not in config:
        text = config["text_config"]  # multimodal wrappers keep the LM under text_config
    reader = _Reader(text, source)
    model_type = str(text.get("model_type") or config.get("model_type") or "")

    layers = reader.int("num_hidden_layers", "n_layer", "num_layers")
    hidden = reader.int("hidden_size", "n_embd", "d_model")
    heads = reader.int("num_attention_heads", "n_head", "num_heads")
    kv_heads = reader.int("num_key_value_heads", "num_kv_heads", "n_head_kv", required=False)
    if kv_heads is None:
        kv_heads = 1 if text.get("multi_query") else heads
    head_dim = reader.int("head_dim", required=False)
    if head_dim is None:
        if hidden % heads:
            raise InputError(f"{source}: hidden_size {hidden} is not a multiple of "
                             f"num_attention_heads {heads} and head_dim is missing")
        head_dim = hidden // heads
    v_head_dim = reader.int("v_head_dim", required=False) or head_dim

    kv_lora_rank = reader.int("kv_lora_rank", required=False)
    rope_dim = None
    if kv_lora_rank:
        attention = "mla"
        rope_dim = reader.int("qk_rope_head_dim")
        head_dim = reader.int("qk_nope_head_dim") + rope_dim
    elif kv_heads == 1:
        attention = "mqa"
    elif kv_heads == heads:
        attention = "mha"
    else:
        attention = "gqa"

    max_context = reader.int("max_position_embeddings", "n_positions", "seq_length")
    window, layer_types = _sliding_layers(text, model_type, layers, max_context, reader)
    try:
        dtype = served_dtype(text.get("torch_dtype") or config.get("torch_dtype")
                             or config.get("dtype"), model_type)
    except InputError as err:
        raise InputError(f"{source}: {err}") from None
    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    is_fp8 = isinstance(quant, dict) and quant.get("quant_method") == "fp8"
    weight_dtype = "fp8" if is_fp8 else dtype

    archs = config.get("architectures")
    return ModelGeometry(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        attention=attention,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=rope_dim,
        sliding_window=window,
        layer_types=layer_types,
        weight_dtype=weight_dtype,
        dtype=dtype,
        num_params=_count_params(text, model_type, attention),
        max_context=max_context,
        architecture=archs[0] if isinstance(archs, list) and archs else None,
        source=source,
    )


def load_config_file(path: str | Path) -> ModelGeometry:
    """Read and parse a config.json; InputError naming the file for any read/parse problem."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{path}: malformed JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return geometry_from_config(config, name=name, source=str(path))


def resolve_model(spec: str) -> ModelGeometry:
    """A preset (case-insensitive), a path to a config.json, or a directory holding one.

    Raises InputError: unknown names list the closest presets (difflib); unreadable or
    malformed files and missing keys name the file and the problem.
    """
    text = str(spec).strip()
    if not text:
        raise InputError("--model is empty; give a preset name or a path to a config.json")
    preset = _PRESET_INDEX.get(text.lower())
    if preset is not None:
        return PRESETS[preset]
    path = Path(text).expanduser()
    if path.is_dir():
        candidate = path / "config.json"
        if not candidate.is_file():
            raise InputError(f"{path}: directory has no config.json")
        return load_config_file(candidate)
    if path.exists() or text.endswith(".json") or "/" in text or "\\" in text:
        return load_config_file(path)
    raise InputError(f"unknown model {text!r}; {_suggest(text)}")


def preset_names() -> tuple[str, ...]:
    """Preset names in table order."""
    return tuple(PRESETS)


def presets_with_same_kv(geometry: ModelGeometry, min_context: int) -> tuple[str, ...]:
    """Presets with `geometry`'s KV rows and parameter count whose window holds `min_context`.

    Used to point a user from, say, Llama-3-70B (8K window) to Llama-3.1-70B (128K): the
    same model shape with a longer, RoPE-scaled window.
    """
    def kv_shape(g: ModelGeometry) -> tuple:
        return (g.attention, g.num_layers, g.num_kv_heads, g.head_dim, g.v_head_dim,
                g.kv_lora_rank, g.qk_rope_head_dim, g.sliding_window, g.layer_types, g.dtype,
                g.hidden_size, g.num_params)

    return tuple(name for name, preset in PRESETS.items()
                 if kv_shape(preset) == kv_shape(geometry) and preset.max_context >= min_context)


def _suggest(text: str) -> str:
    lowered = {name.lower(): name for name in _PRESET_INDEX}
    close = difflib.get_close_matches(text.lower(), list(lowered), n=3, cutoff=0.5)
    names = list(dict.fromkeys(PRESETS[_PRESET_INDEX[c]].name for c in close))
    if names:
        return f"closest presets: {', '.join(names)} (or pass a path to a config.json)"
    return f"presets: {', '.join(PRESETS)} (or pass a path to a config.json)"


class _Reader:
    """Typed lookups in a config dict that fail with the file name and the key."""

    def __init__(self, config: dict, source: str) -> None:
        self.config, self.source = config, source

    def int(self, *keys: str, required: bool = True) -> int | None:
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{self.source}: {key} must be a positive integer, got {value!r}")
            return value
        if required:
            raise InputError(f"{self.source}: missing {' / '.join(repr(k) for k in keys)}")
        return None


def _sliding_layers(
    text: dict, model_type: str, layers: int, max_context: int, reader: _Reader
) -> tuple[int | None, tuple[LayerKind, ...]]:
    """The window and per-layer kinds (see the module docstring for the rules)."""
    window = reader.int("sliding_window", required=False)
    if window is None or text.get("use_sliding_window") is False or window >= max_context:
        return None, ("full",) * layers
    declared = text.get("layer_types")
    if isinstance(declared, list) and len(declared) == layers:
        kinds = ["sliding" if kind == "sliding_attention" else "full" for kind in declared]
    elif model_type == "gemma2":
        kinds = ["sliding" if i % 2 == 0 else "full" for i in range(layers)]
    elif model_type.startswith("gemma3"):
        pattern = int(text.get("sliding_window_pattern") or 6)
        kinds = ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]
    elif model_type.startswith("qwen2"):
        first = int(text.get("max_window_layers") or 0)
        kinds = ["sliding" if i >= first else "full" for i in range(layers)]
    else:
        kinds = ["sliding"] * layers
    if "sliding" not in kinds:
        return None, ("full",) * layers
    return window, tuple(kinds)  # type: ignore[arg-type]


def _count_params(text: dict, model_type: str, attention: str) -> int | None:
    """Parameters of the decoder (see module docstring); None when the layout is unknown."""
    try:
        h, vocab = int(text["hidden_size"]), int(text["vocab_size"])
        layers, heads = int(text["num_hidden_layers"]), int(text["num_attention_heads"])
        kv = int(text.get("num_key_value_heads") or heads)
        hd = int(text.get("head_dim") or h // heads)
        vd = int(text.get("v_head_dim") or hd)
        tie = text.get("tie_word_embeddings", model_type.startswith("gemma"))
        total = vocab * h * (1 if tie else 2) + h  # embeddings, LM head, final norm
        if attention == "mla":
            kvl, rope = int(text["kv_lora_rank"]), int(text["qk_rope_head_dim"])
            qk, vd = int(text["qk_nope_head_dim"]) + rope, int(text["v_head_dim"])
            ql = text.get("q_lora_rank")
            q = h * ql + ql + ql * heads * qk if ql else h * heads * qk
            attn = q + h * (kvl + rope) + kvl + kvl * heads * (qk - rope + vd) + heads * vd * h
        else:
            attn = h * heads * hd + h * kv * (hd + vd) + heads * vd * h
            if model_type.startswith("qwen2"):
                attn += heads * hd + kv * (hd + vd)  # Qwen2 q/k/v biases
            elif text.get("attention_bias"):
                attn += heads * hd + kv * (hd + vd) + h
            if model_type.startswith(("qwen3", "gemma3")):
                attn += 2 * hd  # per-head q/k RMSNorm
        norms = 4 * h if model_type.startswith(("gemma2", "gemma3")) else 2 * h
        inter = int(text["intermediate_size"])
        for layer in range(layers):
            total += attn + norms + _mlp_params(text, h, inter, layer)
        return total
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _mlp_params(text: dict, h: int, inter: int, layer: int) -> int:
    """Gated MLP or MoE parameters of one layer (Mixtral, DeepSeek and Qwen-MoE layouts)."""
    if text.get("num_local_experts"):  # Mixtral: E experts of intermediate_size + router
        experts = int(text["num_local_experts"])
        return experts * 3 * h * inter + h * experts
    if text.get("n_routed_experts"):  # DeepSeek: dense first layers, then routed + shared
        dense_first = int(text.get("first_k_dense_replace") or 0)
        if layer < dense_first or layer % int(text.get("moe_layer_freq") or 1):
            return 3 * h * inter
        routed, moe = int(text["n_routed_experts"]), int(text["moe_intermediate_size"])
        shared = int(text.get("n_shared_experts") or 0)
        bias = routed if text.get("topk_method") == "noaux_tc" else 0
        return (routed + shared) * 3 * h * moe + h * routed + bias
    if text.get("num_experts") and text.get("moe_intermediate_size"):  # Qwen-MoE
        experts, moe = int(text["num_experts"]), int(text["moe_intermediate_size"])
        shared = int(text.get("shared_expert_intermediate_size") or 0)
        return experts * 3 * h * moe + h * experts + (3 * h * shared + h if shared else 0)
    return 3 * h * inter


def _load_presets() -> tuple[dict[str, ModelGeometry], dict[str, str]]:
    table = json.loads(_PRESET_FILE.read_text(encoding="utf-8"))
    presets: dict[str, ModelGeometry] = {}
    index: dict[str, str] = {}
    for name, entry in table.items():
        presets[name] = geometry_from_config(
            entry["config"], name=name, source=f"preset {name} ({entry['hf_repo']})"
        )
        repo = entry["hf_repo"]
        for key in (name, repo, repo.split("/")[-1], *entry.get("aliases", ())):
            index[key.lower()] = name
    return presets, index


PRESETS, _PRESET_INDEX = _load_presets()

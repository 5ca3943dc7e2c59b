"""The files a sandbox writes into its own temp directory (nothing anywhere else).

    DIR/model/config.json                       a tiny Llama, random weights (--load-format dummy)
    DIR/model/tokenizer.json, tokenizer_config.json   its one-character-per-id tokenizer
                                                (tokenizer.py; loaded unless --skip-tokenizer-init)
    DIR/dist/kvctl_sandbox_cpu-0.0.0.dist-info  the CPU platform's entry point
                                                (group sglang.srt.platforms)
    DIR/dist/kvctl_sandbox_plugin-0.0.0.dist-info  kvctl's plugin entry point, written only
                                                when no installed distribution declares it
                                                (kvctl run from a source tree)

`importlib.metadata` finds a distribution by its `*.dist-info` folder on sys.path, so these
two folders on the server's PYTHONPATH are all SGLang's `load_plugins()` and platform
resolution need. They live and die with the sandbox's temp directory.
"""

from __future__ import annotations

import json
from pathlib import Path

PLATFORM_NAME = "kvctl_sandbox_cpu"
PLATFORM_ENTRY = "kvctl.sandbox.cpu_platform:activate"
PLUGIN_GROUP = "sglang.srt.plugins"
PLUGIN_NAME = "kvctl"
PLUGIN_ENTRY = "engine_adapter.plugin.entry:register"

# A tiny Llama (tests/fixtures/tiny_llama's shape, a vocabulary of 512): random weights.
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 512,
    "max_position_embeddings": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-05,
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
}  # fmt: skip
VOCAB = TINY_CONFIG["vocab_size"]


def write_model(target: Path, context_length: int) -> Path:
    """target/config.json; its positions cover `context_length` (SGLang refuses a longer
    context than the model's unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)."""
    target.mkdir(parents=True, exist_ok=True)
    config = {**TINY_CONFIG,
              "max_position_embeddings": max(TINY_CONFIG["max_position_embeddings"],
                                             context_length)}
    (target / "config.json").write_text(json.dumps(config))
    from kvctl.sandbox.tokenizer import write_tokenizer  # noqa: PLC0415 (one-way: files -> tokenizer)

    write_tokenizer(target, VOCAB)
    return target


def _write_dist(target: Path, name: str, group: str, entry: str) -> None:
    dist = target / f"{name}-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")


def plugin_installed() -> bool:
    """True when an installed distribution already declares kvctl's plugin entry point."""
    from importlib.metadata import entry_points

    return any(ep.name == PLUGIN_NAME for ep in entry_points(group=PLUGIN_GROUP))


def write_dists(target: Path, *, plugin: bool) -> Path:
    """The platform's dist-info, and the plugin's when `plugin` and none is installed."""
    _write_dist(target, PLATFORM_NAME, "sglang.srt.platforms",
                f"{PLATFORM_NAME} = {PLATFORM_ENTRY}")
    if plugin and not plugin_installed():
        _write_dist(target, "kvctl_sandbox_plugin", PLUGIN_GROUP,
                    f"{PLUGIN_NAME} = {PLUGIN_ENTRY}")
    return target

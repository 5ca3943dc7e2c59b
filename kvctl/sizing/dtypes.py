"""Storage widths of the KV and weight dtypes kvctl sizes for.

Five canonical names: fp32, bf16, fp16, fp8, fp4. Aliases cover the spellings of HF
`torch_dtype` and of SGLang's `--kv-cache-dtype` (fp8_e4m3, fp8_e5m2, fp4_e2m1, ...).
Widths are kept in bits so that fp4 (half a byte) stays exact in integer arithmetic.

fp4 counts the packed payload only (4 bits per element). SGLang's FP4 KV recipes also keep
one scale per 16-element block; that overhead is recipe-specific and not included here.
"""

from __future__ import annotations

from kvctl.errors import InputError

_BITS: dict[str, int] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp4": 4}

_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "fp4_e2m1": "fp4",
    "float4_e2m1fn_x2": "fp4",
    "nvfp4": "fp4",
}

DTYPE_NAMES: tuple[str, ...] = tuple(_BITS)


def canonical_dtype(name: str) -> str:
    """The canonical name (fp32/bf16/fp16/fp8/fp4) for `name` or one of its aliases.

    Case-insensitive. Raises InputError listing the valid names for anything else.
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _BITS:
        raise InputError(
            f"unknown dtype {name!r}; valid: {', '.join(DTYPE_NAMES)} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return key


def dtype_bits(name: str) -> int:
    """Bits per stored element of `name` (4 for fp4). Raises InputError when unknown."""
    return _BITS[canonical_dtype(name)]


def dtype_bytes(name: str) -> float:
    """Bytes per stored element: fp32 4, bf16/fp16 2, fp8 1, fp4 0.5. InputError when unknown."""
    return dtype_bits(name) / 8


def served_dtype(config_dtype: str | None, model_type: str) -> str:
    """The dtype SGLang serves a checkpoint in when `--dtype auto` (its default).

    Mirrors `_get_and_verify_dtype` in sglang/srt/configs/model_config.py: a missing
    `torch_dtype` counts as float32; float32 checkpoints are downcast to bf16 for Gemma
    models and to fp16 for every other model; anything else is served as stored.
    """
    name = canonical_dtype(config_dtype) if config_dtype else "fp32"
    if name != "fp32":
        return name
    return "bf16" if model_type.startswith("gemma") else "fp16"

"""dtype widths and SGLang's `--dtype auto` rule (kvctl.sizing.dtypes)."""

from __future__ import annotations

import pytest

from kvctl.errors import InputError
from kvctl.sizing.dtypes import canonical_dtype, dtype_bits, dtype_bytes, served_dtype

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "width"), [("fp32", 4.0), ("bf16", 2.0), ("fp16", 2.0), ("fp8", 1.0), ("fp4", 0.5)]
)
def test_dtype_bytes_of_canonical_names(name, width):
    """Each canonical dtype has its storage width in bytes (fp4 is half a byte)."""
    assert dtype_bytes(name) == width


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("E4M3", "fp8"), ("fp8_e5m2", "fp8"), ("bfloat16", "bf16"), ("Float16", "fp16"),
     ("float32", "fp32"), ("fp4_e2m1", "fp4")],
)
def test_aliases_are_case_insensitive(alias, canonical):
    """HF torch_dtype and SGLang --kv-cache-dtype spellings map to the canonical names."""
    assert canonical_dtype(alias) == canonical


def test_fp4_is_four_bits():
    """fp4 is kept as 4 bits so packed sizes stay exact integers."""
    assert dtype_bits("fp4") == 4


def test_unknown_dtype_lists_valid_names():
    """An unknown dtype is an InputError that names the valid choices."""
    with pytest.raises(InputError, match="valid: fp32, bf16, fp16, fp8, fp4"):
        dtype_bytes("int3")


@pytest.mark.parametrize(
    ("config_dtype", "model_type", "served"),
    [("float32", "gemma2", "bf16"), ("float32", "llama", "fp16"), (None, "mistral", "fp16"),
     ("bfloat16", "llama", "bf16"), ("float16", "llama", "fp16")],
)
def test_served_dtype_follows_sglang_auto(config_dtype, model_type, served):
    """float32 checkpoints serve as bf16 (Gemma) or fp16 (others); others as stored."""
    assert served_dtype(config_dtype, model_type) == served

"""Model geometry and the bytes its KV cache takes per token, per rank, per trajectory.

One stored row per token and layer (seed 000 0x02A, seed 003 eq. (1)):

    MHA/GQA/MQA   B_layer = H_kv,rank * (d_K + d_V) * b      (the familiar 2*H_kv*d_h*b
                                                             when d_K == d_V)
    MLA           B_layer = (kv_lora_rank + qk_rope_head_dim) * b   (one latent row; no
                                                             K/V split, no TP sharding)

    B_row,rank = sum over the layers this rank holds of B_layer

This is exactly SGLang 0.5.23's `_compute_cell_size` (srt/model_executor/
pool_configurator.py) for MHA and MLA; tests/integration/test_cell_size_vs_sglang.py
calls SGLang's own function to prove it.

Tensor parallelism follows SGLang's `QKVParallelLinear` rule (srt/layers/linear.py):

    tp <  H_kv   every rank holds H_kv / tp heads      (tp must divide H_kv)
    tp >= H_kv   every rank holds 1 head, replicated   (H_kv must divide tp)
    MLA          every rank holds the whole latent row (replicated)

and the query heads must split evenly (`divide(num_heads, tp)`). Pipeline parallelism
follows `get_pp_indices` (srt/distributed/utils.py): L // pp layers per stage, the last
L % pp stages one more. Per-rank numbers are for the rank holding the most bytes.

Sliding-window layers hold at most `sliding_window` tokens. `bytes_per_token` is the cost
of one token in every layer (what SGLang's default pool charges per token of capacity);
`trajectory_bytes` caps each sliding layer at its window, which is what a hybrid SWA pool
holds for a sequence of that length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from kvctl.errors import InputError
from kvctl.sizing.dtypes import canonical_dtype, dtype_bits

AttentionKind = Literal["mha", "gqa", "mqa", "mla"]
LayerKind = Literal["full", "sliding"]


@dataclass(frozen=True, kw_only=True)
class ModelGeometry:
    """What the KV cache of one model looks like. Immutable; build with `models.resolve_model`.

    `head_dim` is the K head width, `v_head_dim` the V head width (equal for most models).
    For MLA, `kv_lora_rank` and `qk_rope_head_dim` define the cached latent row and the
    head fields describe the attention heads (not what is cached). `layer_types` has one
    entry per layer. `dtype` is the dtype SGLang serves the model in (the default KV dtype);
    `weight_dtype` is the stored weight dtype (fp8 for FP8-quantized checkpoints).
    `num_params` is None when it cannot be derived (then weights must be given explicitly).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    attention: AttentionKind
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    layer_types: tuple[LayerKind, ...] = field(default=())
    weight_dtype: str = "bf16"
    dtype: str = "bf16"
    num_params: int | None = None
    max_context: int = 0
    architecture: str | None = None
    source: str = "preset"

    def __post_init__(self) -> None:
        for label, value in (
            ("num_layers", self.num_layers),
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("v_head_dim", self.v_head_dim),
            ("max_context", self.max_context),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{self.name}: {label} must be a positive integer, got {value!r}")
        if self.attention == "mla" and not (self.kv_lora_rank and self.qk_rope_head_dim):
            raise InputError(f"{self.name}: MLA needs kv_lora_rank and qk_rope_head_dim")
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full",) * self.num_layers)
        if len(self.layer_types) != self.num_layers:
            raise InputError(
                f"{self.name}: {len(self.layer_types)} layer types for {self.num_layers} layers"
            )
        if "sliding" in self.layer_types and not self.sliding_window:
            raise InputError(f"{self.name}: sliding layers need a sliding_window")
        object.__setattr__(self, "weight_dtype", canonical_dtype(self.weight_dtype))
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))

    # ----- parallel layout -------------------------------------------------------------

    @property
    def num_sliding_layers(self) -> int:
        """How many layers attend through a sliding window."""
        return self.layer_types.count("sliding")

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """K/V heads one TP rank stores (SGLang's QKVParallelLinear rule; see module doc).

        For MLA this is the number of latent rows per token and layer: 1, on every rank.
        Raises InputError when tp < 1, tp does not split the query heads, or tp and the KV
        heads do not divide one another.
        """
        _check_positive("tp", tp)
        if self.num_attention_heads % tp:
            raise InputError(
                f"TP={tp} does not divide {self.name}'s {self.num_attention_heads} query heads"
            )
        if self.attention == "mla":
            return 1
        if tp >= self.num_kv_heads:
            if tp % self.num_kv_heads:
                raise InputError(
                    f"TP={tp} cannot replicate {self.name}'s {self.num_kv_heads} KV heads "
                    f"evenly (TP must be a multiple of {self.num_kv_heads} once it exceeds it)"
                )
            return 1
        if self.num_kv_heads % tp:
            raise InputError(
                f"TP={tp} does not divide {self.name}'s {self.num_kv_heads} KV heads"
            )
        return self.num_kv_heads // tp

    def pipeline_stages(self, pp: int = 1) -> tuple[range, ...]:
        """Layer index ranges of each PP stage (SGLang's get_pp_indices).

            L=10, pp=4:  base 2, remainder 2 -> the last 2 stages take one extra layer
            stage:   0      1      2        3
            layers: [0,2)  [2,4)  [4,7)    [7,10)
        """
        _check_positive("pp", pp)
        if pp > self.num_layers:
            raise InputError(f"PP={pp} exceeds {self.name}'s {self.num_layers} layers")
        base, remainder = divmod(self.num_layers, pp)
        stages, start = [], 0
        for stage in range(pp):
            size = base + (1 if stage >= pp - remainder else 0)
            stages.append(range(start, start + size))
            start += size
        return tuple(stages)

    # ----- bytes -----------------------------------------------------------------------

    def elements_per_token_per_layer(self, tp: int = 1) -> int:
        """Stored scalars per token and layer on one TP rank (K plus V, or the MLA latent)."""
        heads = self.kv_heads_per_rank(tp)
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim  # type: ignore[operator]
        return heads * (self.head_dim + self.v_head_dim)

    def bytes_per_token(self, kv_dtype: str | None = None, tp: int = 1, pp: int = 1) -> int:
        """Bytes one token takes in every layer of the busiest rank (SGLang's cell_size).

        Sliding windows do not reduce this: it is the per-token cost of pool capacity.
        Raises InputError for an unknown dtype or an impossible TP/PP split.
        """
        bits = dtype_bits(kv_dtype or self.dtype)
        elements = self.elements_per_token_per_layer(tp)
        busiest = max(len(stage) for stage in self.pipeline_stages(pp))
        return _bits_to_bytes(busiest * elements * bits)

    def model_bytes_per_token(self, kv_dtype: str | None = None) -> int:
        """Bytes one token takes across the whole model, all heads, all layers (TP=PP=1)."""
        return self.bytes_per_token(kv_dtype, tp=1, pp=1)

    def tokens_held(self, layer: int, context: int) -> int:
        """Tokens layer `layer` keeps for a sequence of `context` tokens (a window caps it)."""
        if self.layer_types[layer] == "sliding":
            return min(context, self.sliding_window)  # type: ignore[type-var]
        return context

    def check_context(self, context: int) -> None:
        """Raise InputError unless 1 <= context <= max_context (the model's window)."""
        _check_positive("context", context)
        if context > self.max_context:
            raise InputError(
                f"context {context:,} exceeds {self.name}'s window of {self.max_context:,} "
                f"tokens (max_position_embeddings)"
            )

    def trajectory_bytes(
        self, context: int, kv_dtype: str | None = None, tp: int = 1, pp: int = 1
    ) -> int:
        """KV bytes one sequence of `context` tokens holds on the busiest rank.

        Sliding-window layers hold min(context, window) tokens. Raises InputError when the
        context is not positive or exceeds the model's window.
        """
        self.check_context(context)
        bits = dtype_bits(kv_dtype or self.dtype)
        elements = self.elements_per_token_per_layer(tp)
        return max(
            _bits_to_bytes(
                sum(self.tokens_held(layer, context) for layer in stage) * elements * bits
            )
            for stage in self.pipeline_stages(pp)
        )

    def trajectory_bytes_uncapped(
        self, context: int, kv_dtype: str | None = None, tp: int = 1, pp: int = 1
    ) -> int:
        """KV bytes of `context` tokens when every layer stores every token (no windows)."""
        self.check_context(context)
        return context * self.bytes_per_token(kv_dtype, tp, pp)


def _bits_to_bytes(bits: int) -> int:
    """Whole bytes for `bits` (fp4 packs two elements per byte; an odd count rounds up)."""
    return math.ceil(bits / 8)


def _check_positive(label: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{label} must be a positive integer, got {value!r}")

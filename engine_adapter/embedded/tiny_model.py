"""A tiny real Llama-style transformer (fp32, random weights, GQA) keeping its K/V in SGLang's pool.

It exists to prove exact prefix reuse: the K/V of every token lives only in the caller's
`MHATokenToKVPool`, written into the per-layer buffers the pool hands out and read back through
SGLang's `req_to_token` page table, so a request whose prefix was matched in the radix tree
attends over K/V computed by an earlier request. Its logits must equal (fp32, max abs diff
<= 1e-6) those of the same request computed with no reuse.

Imports only torch and kvctl; the pool and the page table come from the caller (duck-typed
against SGLang 0.5.23's `MHATokenToKVPool` / `ReqToTokenPool.req_to_token`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import torch

from engine_adapter.embedded.tiny_layers import (
    LayerWeights,
    apply_rope,
    causal_gqa_attention,
    rms_norm,
    swiglu_mlp,
)
from engine_adapter.base.errors import InputError, IntegrityError

# HF config.json key for each TinyModelConfig field (head_dim is optional there).
_HF_KEYS = {
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_attention_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "num_layers": "num_hidden_layers",
    "vocab_size": "vocab_size",
    "rope_theta": "rope_theta",
    "rms_norm_eps": "rms_norm_eps",
}


@dataclass(frozen=True, kw_only=True)
class TinyModelConfig:
    """Shape of the tiny model; its pool is built with `num_kv_heads`, `head_dim`, `num_layers`."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InputError(f"tiny model config: {field.name} must be > 0")
        if self.num_attention_heads % self.num_kv_heads:
            raise InputError(
                f"tiny model config: num_attention_heads ({self.num_attention_heads}) is not a "
                f"multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise InputError(f"tiny model config: head_dim {self.head_dim} is odd; RoPE pairs dims")

    @classmethod
    def from_config_json(cls, path: str | Path) -> TinyModelConfig:
        """Read an HF Llama `config.json` (or a directory holding one). Raises InputError."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read model config {path}: {exc}") from None
        if not isinstance(raw, dict):
            raise InputError(f"model config {path} is not a JSON object")
        values: dict[str, Any] = {}
        for name, key in _HF_KEYS.items():
            if key not in raw and key != "head_dim":
                raise InputError(f"model config {path} lacks {key!r}")
            wanted = (int, float) if name in ("rope_theta", "rms_norm_eps") else (int,)
            value = raw.get(key)
            if key in raw and (not isinstance(value, wanted) or isinstance(value, bool)):
                raise InputError(f"model config {path}: {key} is not a {wanted[-1].__name__}")
            values[name] = value
        if values["head_dim"] is None and values["num_attention_heads"] > 0:
            # HF Llama's default when config.json omits it.
            values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
        return cls(**values)


class ForwardItem(NamedTuple):
    """One request's share of a forward pass.

        positions:  0 ......... start-1 | start ........ start+n-1
        K/V:        already in the pool  | token_ids, written to out_slots
        page table: req_to_token[req_pool_idx, 0 : start+n] maps every position to its slot
    """

    req_pool_idx: int
    start: int  # tokens of this request already in the pool (matched prefix, earlier extends)
    token_ids: torch.Tensor  # int64, shape (n,)
    out_slots: torch.Tensor  # int64, shape (n,): pool slots for the new tokens' K/V


class TinyTransformer:
    """Deterministic random-weight Llama-style decoder whose only KV memory is the caller's pool."""

    def __init__(self, config: TinyModelConfig, seed: int = 0, device: str = "cpu") -> None:
        """Draw every weight from `torch.Generator().manual_seed(seed)` on the CPU, then move
        it to `device`: same seed, same model, on any device."""
        self.config = config
        self.device = torch.device(device)
        generator = torch.Generator().manual_seed(seed)

        def normal(*shape: int, std: float) -> torch.Tensor:
            return torch.randn(*shape, generator=generator, dtype=torch.float32) * std

        def linear(out_features: int, in_features: int) -> torch.Tensor:
            # std 1/sqrt(fan_in) keeps activations and logits O(1): a 1e-6 bound means something.
            return normal(out_features, in_features, std=in_features**-0.5)

        def norm_weight() -> torch.Tensor:
            return 1.0 + normal(config.hidden_size, std=0.1)

        hidden, q_width = config.hidden_size, config.num_attention_heads * config.head_dim
        kv_width = config.num_kv_heads * config.head_dim
        self.embedding = normal(config.vocab_size, hidden, std=1.0)
        self.layers = [
            LayerWeights(
                input_norm=norm_weight(),
                q_proj=linear(q_width, hidden),
                k_proj=linear(kv_width, hidden),
                v_proj=linear(kv_width, hidden),
                o_proj=linear(hidden, q_width),
                post_attention_norm=norm_weight(),
                gate_proj=linear(config.intermediate_size, hidden),
                up_proj=linear(config.intermediate_size, hidden),
                down_proj=linear(hidden, config.intermediate_size),
            )
            for _ in range(config.num_layers)
        ]
        self.final_norm = norm_weight()
        self.lm_head = linear(config.vocab_size, hidden)
        # Weights are drawn in fp32 and computed in fp64: K/V are rounded to the pool's fp32
        # only when stored. Matmul blocking depends on the batch shape (a 256-token chunk
        # and a 15-token extend sum in different orders); fp64 keeps those differences far
        # below fp32 rounding, so the stored K/V, and the logits, do not depend on how a
        # prefix was chunked or whether it was reused.
        on = dict(dtype=torch.float64, device=self.device)
        self.embedding = self.embedding.to(**on)
        self.final_norm = self.final_norm.to(**on)
        self.lm_head = self.lm_head.to(**on)
        self.layers = [LayerWeights(**{k: v.to(**on) for k, v in w._asdict().items()}) for w in self.layers]

    def forward(
        self, kv_pool: Any, req_to_token: torch.Tensor, items: Sequence[ForwardItem]
    ) -> torch.Tensor:
        """Run every item's new tokens; return each item's last-token logits, `(len(items), vocab)`.

        Mutates `kv_pool`: writes K/V of each item's new tokens, per layer, at `out_slots`
        (rows of the buffers `kv_pool.get_kv_buffer(layer)` returns, which alias the pool).
        Reads K/V of positions `[0, start + n)` through `req_to_token[req_pool_idx]`, which must
        already map `[start, start + n)` to `out_slots` (SGLang's allocation writes it).
        Raises InputError for a pool that cannot hold K/V (NoOpMHATokenToKVPool) or does not
        match the model's shape, or a malformed item; IntegrityError when the page table does
        not map the new positions to `out_slots` or maps a position outside the pool's slots.
        """
        self._check_pool(kv_pool)
        if not items:
            raise InputError("tiny model forward needs at least one item")
        with torch.no_grad():
            return torch.stack([self._forward_item(kv_pool, req_to_token, it) for it in items])

    def _forward_item(
        self, kv_pool: Any, req_to_token: torch.Tensor, item: ForwardItem
    ) -> torch.Tensor:
        config = self.config
        new_tokens = self._check_item(req_to_token, item)
        end = item.start + new_tokens
        slots = req_to_token[item.req_pool_idx, :end].to(torch.int64)
        out_slots = item.out_slots.to(torch.int64)
        if not torch.equal(slots[item.start :], out_slots):
            raise IntegrityError(
                f"req_to_token[{item.req_pool_idx}, {item.start}:{end}] = "
                f"{slots[item.start:].tolist()} does not point at out_slots {out_slots.tolist()}"
            )
        # Slots [0, page_size) are SGLang's padding page; real ones end at size + page_size.
        first_real_slot, slot_end = kv_pool.page_size, kv_pool.size + kv_pool.page_size
        if int(slots.min()) < first_real_slot or int(slots.max()) >= slot_end:
            raise IntegrityError(
                f"req_to_token[{item.req_pool_idx}, 0:{end}] maps a position to a slot outside "
                f"[{first_real_slot}, {slot_end}): min {int(slots.min())}, max {int(slots.max())}"
            )
        positions = torch.arange(item.start, end, device=self.device)
        hidden = self.embedding[item.token_ids.to(device=self.device, dtype=torch.int64)]
        for layer_id, weights in enumerate(self.layers):
            normed = rms_norm(hidden, weights.input_norm, config.rms_norm_eps)
            query = (normed @ weights.q_proj.T).view(new_tokens, config.num_attention_heads, -1)
            key = (normed @ weights.k_proj.T).view(new_tokens, config.num_kv_heads, -1)
            value = (normed @ weights.v_proj.T).view(new_tokens, config.num_kv_heads, -1)
            query = apply_rope(query, positions, config.rope_theta)
            key = apply_rope(key, positions, config.rope_theta)
            # Into SGLang's pool first, then read the whole request back through the page
            # table: the new tokens' K/V take the same path as the cached prefix's.
            key_buffer, value_buffer = kv_pool.get_kv_buffer(layer_id)
            # The same row scatter as set_kv_buffer's CPU fallback (`k_cache[loc] = k`), done
            # here because that fallback imports SGLang's CUDA-graph runner (einops, ...).
            key_buffer[out_slots] = key.to(key_buffer.dtype)
            value_buffer[out_slots] = value.to(value_buffer.dtype)
            keys, values = key_buffer[slots].double(), value_buffer[slots].double()
            attended = causal_gqa_attention(query, keys, values, item.start)
            hidden = hidden + attended @ weights.o_proj.T
            normed = rms_norm(hidden, weights.post_attention_norm, config.rms_norm_eps)
            hidden = hidden + swiglu_mlp(normed, weights)
        last = rms_norm(hidden[-1:], self.final_norm, config.rms_norm_eps)
        return (last @ self.lm_head.T)[0]

    def _check_item(self, req_to_token: torch.Tensor, item: ForwardItem) -> int:
        """Return the item's new-token count; raise InputError when it cannot be run."""
        new_tokens = item.token_ids.numel()
        if new_tokens == 0 or item.token_ids.dim() != 1:
            raise InputError(
                f"item for req_pool_idx {item.req_pool_idx}: token_ids must be 1-D, non-empty"
            )
        if item.out_slots.shape != item.token_ids.shape:
            raise InputError(
                f"item for req_pool_idx {item.req_pool_idx}: {new_tokens} tokens but "
                f"{item.out_slots.numel()} out_slots"
            )
        if item.start < 0 or item.start + new_tokens > req_to_token.shape[1]:
            raise InputError(
                f"item for req_pool_idx {item.req_pool_idx}: positions [{item.start}, "
                f"{item.start + new_tokens}) exceed max context {req_to_token.shape[1]}"
            )
        if not 0 <= item.req_pool_idx < req_to_token.shape[0]:
            raise InputError(f"req_pool_idx {item.req_pool_idx} is outside req_to_token")
        out_of_vocab = (item.token_ids < 0) | (item.token_ids >= self.config.vocab_size)
        if bool(out_of_vocab.any()):
            raise InputError(f"token ids outside the vocabulary of {self.config.vocab_size}")
        return new_tokens

    def _check_pool(self, kv_pool: Any) -> None:
        """Raise InputError unless `kv_pool` is a real NHD fp32 pool of this model's KV shape."""
        config, pool_name = self.config, type(kv_pool).__name__
        key_rows = kv_pool.get_key_buffer(0).shape[0]
        # A real pool has a row per slot plus the padding page (SGLang: size + page_size rows);
        # NoOpMHATokenToKVPool keeps page_size placeholder rows and no bytes for K/V.
        if key_rows < kv_pool.size + kv_pool.page_size:
            raise InputError(
                f"{pool_name} holds {key_rows} K rows for {kv_pool.size} slots: it stores no "
                "K/V bytes, so the tiny model cannot run on it (use MHATokenToKVPool)"
            )
        layout = getattr(kv_pool, "kv_cache_layout", "nhd")
        expected = (config.num_kv_heads, config.head_dim, config.head_dim, config.num_layers)
        actual = (kv_pool.head_num, kv_pool.head_dim, kv_pool.v_head_dim, kv_pool.layer_num)
        # Only an unquantized pool whose buffers are stored as fp32 hands out views that alias
        # its memory; a quantized pool would return a dequantized copy and lose the writes.
        stored_as_fp32 = kv_pool.dtype == torch.float32 and kv_pool.store_dtype == torch.float32
        if getattr(kv_pool, "is_quantized_kv_cache", False) or not stored_as_fp32:
            raise InputError(f"{pool_name} stores {kv_pool.store_dtype}; the model needs fp32")
        if layout != "nhd" or actual != expected:
            raise InputError(
                f"{pool_name} (layout {layout}, kv heads/head dim/v head dim/layers {actual}) "
                f"does not fit the tiny model (nhd, {expected})"
            )

"""The pure tensor math of the tiny Llama-style transformer: norm, RoPE, GQA attention, MLP.

Stateless functions over fp32 tensors; nothing here touches a KV pool or a page table (that is
`tiny_model.TinyTransformer`'s job). Every function returns a new tensor and mutates nothing.
Shapes use `n` for the new tokens of one request, `T` for all its tokens so far (`T = start + n`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class LayerWeights(NamedTuple):
    """One decoder layer's parameters, stored as `(out_features, in_features)` like torch Linear."""

    input_norm: torch.Tensor  # (hidden,)
    q_proj: torch.Tensor  # (heads * head_dim, hidden)
    k_proj: torch.Tensor  # (kv_heads * head_dim, hidden)
    v_proj: torch.Tensor  # (kv_heads * head_dim, hidden)
    o_proj: torch.Tensor  # (hidden, heads * head_dim)
    post_attention_norm: torch.Tensor  # (hidden,)
    gate_proj: torch.Tensor  # (intermediate, hidden)
    up_proj: torch.Tensor  # (intermediate, hidden)
    down_proj: torch.Tensor  # (hidden, intermediate)


def rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm over the last dimension: `x / sqrt(mean(x^2) + eps) * weight`."""
    variance = hidden.pow(2).mean(dim=-1, keepdim=True)
    return hidden * torch.rsqrt(variance + eps) * weight


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate `x` of shape `(n, heads, head_dim)` by its absolute `positions` (shape `(n,)`).

    HF Llama's rotate-half convention: dimension `i` pairs with `i + head_dim/2`. The angles
    depend on the position only, never on `n`, so a token at position p gets bit-identical K
    whether it was computed in a long prefill or a short extend after a prefix hit.
    """
    head_dim = x.shape[-1]
    exponents = torch.arange(0, head_dim, 2, dtype=x.dtype, device=x.device) / head_dim
    inv_freq = 1.0 / (theta**exponents)  # (head_dim/2,)
    angles = positions.to(x.dtype)[:, None] * inv_freq[None, :]  # (n, head_dim/2)
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]  # (n, 1, head_dim)
    half = head_dim // 2
    rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * angles.cos() + rotated_half * angles.sin()


def causal_gqa_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int
) -> torch.Tensor:
    """Causal attention of `n` new queries over all `T = start + n` keys of their request.

    query: `(n, heads, d)`; keys, values: `(T, kv_heads, d)`; returns `(n, heads * d)`.
    Query heads are grouped over KV heads (GQA): query head `h` reads KV head
    `h // (heads // kv_heads)`, as in HF's `repeat_kv`.

    The mask, with query i sitting at absolute position `start + i`:

        key position j:   0 1 ... start-1 | start ... start+n-1
        query 0 (start):  x x ...   x     |   x      .  .  .      x = visible
        query n-1:        x x ...   x     |   x  ...  x          key j visible iff j <= start + i
    """
    new_tokens, heads, head_dim = query.shape
    total_tokens, kv_heads, _ = keys.shape
    group = heads // kv_heads
    # (kv_heads, group * n, d): query heads of one group share that group's K/V.
    grouped_query = query.reshape(new_tokens, kv_heads, group, head_dim).permute(1, 2, 0, 3)
    grouped_query = grouped_query.reshape(kv_heads, group * new_tokens, head_dim)
    scores = grouped_query @ keys.permute(1, 2, 0) * (head_dim**-0.5)  # (kv_heads, g*n, T)

    query_positions = torch.arange(start, start + new_tokens, device=query.device).repeat(group)
    key_positions = torch.arange(total_tokens, device=query.device)  # query_positions: (g*n,)
    hidden_keys = key_positions[None, :] > query_positions[:, None]
    scores = scores.masked_fill(hidden_keys, float("-inf"))
    probabilities = torch.softmax(scores, dim=-1)
    attended = probabilities @ values.permute(1, 0, 2)  # (kv_heads, g*n, d)

    attended = attended.reshape(kv_heads, group, new_tokens, head_dim).permute(2, 0, 1, 3)
    return attended.reshape(new_tokens, heads * head_dim)


def swiglu_mlp(hidden: torch.Tensor, weights: LayerWeights) -> torch.Tensor:
    """Llama MLP: `down(silu(gate(x)) * up(x))`."""
    gate = torch.nn.functional.silu(hidden @ weights.gate_proj.T)
    return (gate * (hidden @ weights.up_proj.T)) @ weights.down_proj.T

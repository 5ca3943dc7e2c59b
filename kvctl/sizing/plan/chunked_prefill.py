"""Token-budget iteration time, TTFT and ITL with and without chunked prefill.

A roofline per iteration (seed 003 napkin math 0.5): every iteration streams the weights
once (memory time) and spends 2 P FLOPs per token it processes (compute time); it takes
the larger of the two. Decode-only iterations are memory-bound; a monolithic prefill is
compute-bound and stalls every running decode stream for its whole duration. Chunked
prefill pairs one chunk with the running decode tokens per iteration:

    monolithic:  [======== prefill S tokens ========][d][d][d]   ITL spike = T_prefill
    chunked:     [c1+d][c2+d][c3+d] ... [cK+d][d][d]             ITL = one mixed iteration
                 K = ceil(S / C) iterations before the first token

Simplifications kept from the seed: K/V reads and attention FLOPs are ignored; the mixed
iteration runs at the prefill MFU; there is no queueing delay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvctl.sizing.plan._checks import fraction, non_negative, positive
from kvctl.util.pages import ceil_div


@dataclass(frozen=True, kw_only=True)
class ChunkedPrefillPlan:
    """Modeled times in seconds for one prompt arriving while `decode_batch` streams run."""

    params: float
    weight_bytes: float
    devices: int
    decode_batch: int
    prompt_tokens: int
    chunk_tokens: int
    weight_stream_seconds: float  # weights / (devices * bandwidth)
    decode_compute_seconds: float  # 2 P B / (decode MFU * peak)
    decode_iteration_seconds: float  # baseline ITL
    decode_bound: str  # "memory" or "compute"
    monolithic_prefill_seconds: float  # 2 P S / (prefill MFU * peak) = TTFT = ITL spike
    monolithic_itl_degradation: float  # spike / baseline ITL
    chunks: int  # K
    token_budget: int  # chunk + decode tokens per iteration
    chunk_iteration_seconds: float  # max(memory, compute) of a full chunk iteration
    chunk_iteration_bound: str
    chunked_ttft_seconds: float  # sum over the K iterations (last chunk may be short)
    chunked_max_itl_seconds: float
    balanced_chunk_tokens: int  # largest chunk whose compute time <= weight streaming


def plan_chunked_prefill(
    *,
    params: float,
    weight_bytes: float,
    peak_flops: float,
    memory_bandwidth: float,
    decode_batch: int,
    prompt_tokens: int,
    chunk_tokens: int,
    decode_mfu: float = 0.5,
    prefill_mfu: float = 0.6,
    devices: int = 1,
) -> ChunkedPrefillPlan:
    """Model one prompt's TTFT and the running streams' ITL; pure.

    `peak_flops` and `memory_bandwidth` are per device; weights and FLOPs split evenly
    across `devices` (tensor parallelism). Raises InputError on non-positive inputs or an
    MFU outside (0, 1].
    """
    for name, value in (
        ("params", params),
        ("weight bytes", weight_bytes),
        ("peak FLOP/s", peak_flops),
        ("memory bandwidth", memory_bandwidth),
        ("prompt tokens", prompt_tokens),
        ("chunk tokens", chunk_tokens),
        ("devices", devices),
        ("decode MFU", decode_mfu),
        ("prefill MFU", prefill_mfu),
    ):
        positive(name, value)
    non_negative("decode batch", decode_batch)
    fraction("decode MFU", decode_mfu, allow_one=True)
    fraction("prefill MFU", prefill_mfu, allow_one=True)
    prefill_rate = prefill_mfu * peak_flops * devices
    weight_stream = weight_bytes / (devices * memory_bandwidth)  # seed 003 napkin 0.5: 46.7 ms
    decode_compute = 2 * params * decode_batch / (decode_mfu * peak_flops * devices)
    monolithic = 2 * params * prompt_tokens / prefill_rate  # seed 003: 1,194.7 ms

    def mixed_iteration(prefill_chunk: int) -> float:
        return max(weight_stream, 2 * params * (prefill_chunk + decode_batch) / prefill_rate)

    chunks = ceil_div(prompt_tokens, chunk_tokens)
    last_chunk = prompt_tokens - (chunks - 1) * chunk_tokens
    full_iteration = mixed_iteration(min(chunk_tokens, prompt_tokens))
    ttft = (chunks - 1) * mixed_iteration(chunk_tokens) + mixed_iteration(last_chunk)
    chunk_compute = 2 * params * (min(chunk_tokens, prompt_tokens) + decode_batch) / prefill_rate
    decode_iteration = max(weight_stream, decode_compute)
    # t_comp(C + B) = t_mem  =>  C = t_mem * R / (2 P) - B  (the roofline balance point)
    # (floor with a 1e-9 guard so 159.99999999999997 counts as the 160 it represents)
    balance_tokens = weight_bytes * prefill_rate / (devices * memory_bandwidth * 2 * params)
    balanced = math.floor(balance_tokens + 1e-9) - decode_batch
    return ChunkedPrefillPlan(
        params=params,
        weight_bytes=weight_bytes,
        devices=devices,
        decode_batch=decode_batch,
        prompt_tokens=prompt_tokens,
        chunk_tokens=chunk_tokens,
        weight_stream_seconds=weight_stream,
        decode_compute_seconds=decode_compute,
        decode_iteration_seconds=decode_iteration,
        decode_bound="memory" if weight_stream >= decode_compute else "compute",
        monolithic_prefill_seconds=monolithic,
        monolithic_itl_degradation=monolithic / decode_iteration,
        chunks=chunks,
        token_budget=min(chunk_tokens, prompt_tokens) + decode_batch,
        chunk_iteration_seconds=full_iteration,
        chunk_iteration_bound="compute" if chunk_compute > weight_stream else "memory",
        chunked_ttft_seconds=ttft,
        chunked_max_itl_seconds=max(full_iteration, decode_iteration),
        balanced_chunk_tokens=max(balanced, 0),
    )

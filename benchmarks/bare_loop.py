"""The bare-loop reference for `bench_replay.py`: SGLang's cache driven with no kvctl code.

It replays a Mooncake trace in trace order, one request at a time, on SGLang 0.5.23's
`UnifiedRadixCache` (Rust core) and `PagedTokenToKVPoolAllocator`, with the cache work a
serving engine cannot avoid and nothing else (no clock, no batching, no instrumentation):

    match_prefix(tokens, limit S-1) -> lock(node)
    evict(shortfall) if the pool is short -> alloc(pages for prompt + output - hit)
    insert(page-aligned prompt + output, prev_prefix_len = hit) -> unlock
    free(the partial last page)

Token ids follow the Mooncake convention (block(b) = [1 + 512 b, ..., 512 + 512 b], output
ids unique from 2^30), written out here rather than imported so that the reference shares
no code with the loop it is compared with.

    python benchmarks/bare_loop.py TRACE --pool-tokens N [--limit N] [--page 16]

prints one JSON line: loop_s, requests, prompt_tokens, hit_tokens, evicted_tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from array import array
from pathlib import Path

BLOCK = 512


def build(pool_tokens: int, page: int):
    """SGLang's tree and allocator, with the least runtime context they need."""
    import torch
    from sglang.srt import runtime_context as rtc
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import NoOpMHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs

    torch.set_num_threads(1)
    # A local model directory (a config.json only): ServerArgs resolves its path.
    model_dir = Path(__file__).resolve().parents[1] / "engine_adapter" / "embedded" / "data"
    rtc.publish(ServerArgs(model_path=str(model_dir), device="cpu", skip_tokenizer_init=True,
                           page_size=page), role="scheduler")
    kv = NoOpMHATokenToKVPool(size=pool_tokens, page_size=page, dtype=torch.float32, head_num=1,
                              head_dim=1, layer_num=1, device="cpu", enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(size=pool_tokens, page_size=page, dtype=torch.float32,
                                            device="cpu", kvcache=kv, need_sort=pool_tokens > 1_000_000)
    rows = ReqToTokenPool(size=1, max_context_len=8, device="cpu", enable_memory_saver=False)
    tree = UnifiedRadixCache(params=CacheInitParams(
        disable=False, req_to_token_pool=rows, token_to_kv_pool_allocator=allocator,
        page_size=page, tree_components=(ComponentType.FULL,), eviction_policy="lru",
        tree_core_backend="rust"))
    return tree, allocator


def run(path: str, pool_tokens: int, page: int, limit: int | None) -> dict:
    import numpy as np
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    tree, allocator = build(pool_tokens, page)
    offsets = np.arange(1, BLOCK + 1, dtype=np.int64)
    output_id = 1 << 30
    requests = prompt_total = hits = evicted = 0
    started = time.monotonic()
    with open(path) as handle:
        for number, text in enumerate(handle):
            if limit is not None and number >= limit:
                break
            line = json.loads(text)
            n_in, n_out = line["input_length"], line["output_length"]
            ids = np.asarray(line["hash_ids"], dtype=np.int64)
            prompt = (ids[:, None] * BLOCK + offsets).reshape(-1)[:n_in]
            tokens = np.concatenate([prompt, np.arange(output_id, output_id + n_out, dtype=np.int64)])
            output_id += n_out
            key_ids = array("q", tokens.tobytes())
            match = tree.match_prefix(MatchPrefixParams(key=RadixKey(key_ids, limit=n_in - 1)))
            hit = match.device_prefix_len
            lock = tree.lock(match.last_device_node)
            total = n_in + n_out
            need = -(-total // page) * page - hit
            short = need - allocator.available_size()
            if short > 0:
                evicted += tree.evict(EvictParams(num_tokens=short)).num_tokens_evicted
            new = allocator.alloc(need)
            prefix = tree.path_device_indices(match.last_device_node)[:hit].to(torch.int64)
            values = torch.cat([prefix, new])
            aligned = total // page * page
            result = tree.insert(InsertParams(key=RadixKey(key_ids[:aligned]), value=values[:aligned],
                                              prev_prefix_len=hit))
            tree.unlock(lock)
            if aligned < total:
                allocator.free(values[aligned:])
            del result
            requests += 1
            prompt_total += n_in
            hits += hit
    return {"loop_s": time.monotonic() - started, "requests": requests,
            "prompt_tokens": prompt_total, "hit_tokens": hits, "evicted_tokens": evicted}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--pool-tokens", type=int, required=True)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--page", type=int, default=16)
    args = parser.parse_args()
    print(json.dumps(run(args.trace, args.pool_tokens, args.page, args.limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

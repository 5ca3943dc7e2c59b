"""TEST-ONLY: SGLang's HiCache stack built in this process on the CPU, as a server builds it.

`build_hicache_cache()` builds the embedded engine's real pools and allocator
(engine_adapter/embedded/sglang_runtime.py), publishes a `ServerArgs` with
`--enable-hierarchical-cache --hicache-ratio 2 --hicache-io-backend direct
--hicache-mem-layout layer_first`, and calls SGLang's own `UnifiedRadixCache.init_hicache`.
The one CPU difference is the stack strategy the test platform registers
(kvctl/sandbox/hicache_cpu.py: SGLang's `MHATokenToKVPoolHost` unpinned,
its direct copies done by torch); controller, host pool, tree and acks are SGLang's.

The helpers drive it with the calls SGLang's scheduler makes, in its order:

    insert(tokens)          allocator.alloc + cache.insert  (write-through issues a backup)
    settle()                cache.check_hicache_events()    (acks: writing/loading_check)
    evict(n)                cache.evict                     (device copy goes, host stays)
    start_load_back(tokens) match_prefix + init_load_back   (the scheduler's PrefillAdder)
                            + ready_to_load_host_cache      (Scheduler.run_batch)
"""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple

PAGE = 4
POOL_TOKENS = 256
HOST_BUDGET_BYTES = 1 << 30  # booked against SGLang's own budget scope, not the machine's


class HiCacheStack(NamedTuple):
    cache: Any
    allocator: Any
    host_pool: Any


def build_hicache_cache(*, tree_core: str = "rust", hicache: bool = True,
                        write_policy: str = "write_through") -> HiCacheStack:
    """A fresh UnifiedRadixCache on a 256-token pool; with its HiCache host tier (ratio 2)."""
    from kvctl.sandbox import hicache_cpu

    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.sglang_runtime import build_components

    parts = build_components(EngineConfig(pool_tokens=POOL_TOKENS, page_size=PAGE, kv_pool="mha",
                                          max_running_requests=8, max_context_len=512,
                                          tree_core=tree_core))
    from sglang.srt import runtime_context
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.pool_host.base import host_memory_budget_scope
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs

    params = CacheInitParams(
        disable=False, req_to_token_pool=parts.req_to_token_pool,
        token_to_kv_pool_allocator=parts.allocator, page_size=PAGE,
        tree_components=(ComponentType.FULL,), eviction_policy="lru",
        tree_core_backend=tree_core,
    )
    if not hicache:
        return HiCacheStack(UnifiedRadixCache(params=params), parts.allocator, None)
    hicache_cpu.register()
    server_args = ServerArgs(
        model_path=parts.server_args.model_path, device="cpu", skip_tokenizer_init=True,
        page_size=PAGE, enable_hierarchical_cache=True, hicache_ratio=2.0,
        hicache_io_backend="direct", hicache_mem_layout="layer_first",
        hicache_write_policy=write_policy,
    )
    runtime_context.publish(server_args, role="scheduler")
    cache = UnifiedRadixCache(params=params)
    with host_memory_budget_scope(HOST_BUDGET_BYTES):
        cache.init_hicache(server_args, params)
    return HiCacheStack(cache, parts.allocator, cache.full_kv_pool_host)


def key(tokens: list[int]) -> Any:
    from sglang.srt.mem_cache.radix_cache import RadixKey

    return RadixKey(array("q", tokens))


def insert(stack: HiCacheStack, tokens: list[int]) -> None:
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams

    stack.cache.insert(InsertParams(key=key(tokens), value=stack.allocator.alloc(len(tokens))))


def settle(stack: HiCacheStack) -> None:
    stack.cache.check_hicache_events()


def evict(stack: HiCacheStack, tokens: int) -> int:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    return stack.cache.evict(EvictParams(num_tokens=tokens)).num_tokens_evicted


def start_load_back(stack: HiCacheStack, tokens: list[int]) -> int:
    """Admit a request whose prefix is on host only: returns the tokens SGLang loads."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.mem_cache.base_prefix_cache import InitLoadBackParams, MatchPrefixParams
    from sglang.srt.sampling.sampling_params import SamplingParams

    match = stack.cache.match_prefix(MatchPrefixParams(key=key(tokens)))
    sampling = SamplingParams(max_new_tokens=1, temperature=0, ignore_eos=True)
    sampling.normalize(None)
    req = Req("load-back", "", array("q", tokens + [1]), sampling, vocab_size=1 << 31,
              eos_token_ids=set())
    req.last_node = match.last_device_node
    loaded, _node = stack.cache.init_load_back(InitLoadBackParams(
        best_match_node=match.best_match_node, host_hit_length=match.host_hit_length, req=req))
    stack.cache.ready_to_load_host_cache()
    return loaded


def node_read(cache: Any) -> Any:
    """This instant's per-node read, as the plugin's sampler takes it (pretty_print)."""
    from engine_adapter.instrument.tree_dump import dump_nodes
    from engine_adapter.tree_nodes import TreeNodes, TreeNodeView

    return TreeNodes.of([TreeNodeView(
        node_id=n.node_id, parent_id=n.parent_id, depth=n.depth, tokens=n.key_tokens,
        pages=n.key_tokens // PAGE, recorded_lock_ref=n.lock_ref, derived_lock_ref=0,
        holders=(), namespace=None) for n in dump_nodes(cache)])

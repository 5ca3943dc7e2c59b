"""SGLang's HiCache (hierarchical cache) in the embedded engine: built and driven by SGLang.

With `EngineConfig.hicache_ratio` set, the engine's `UnifiedRadixCache` gets SGLang's host
tier exactly as a server with `--enable-hierarchical-cache` gets it: `init_hicache` builds
the host pool (`MHATokenToKVPoolHost`) and the cache controller (`HybridCacheController`)
through SGLang's stack-strategy registry. The one CPU difference is the strategy the kvctl
CPU platform registers (engine_adapter/embedded/hicache_cpu.py: SGLang's host pool unpinned, its
`direct` / `layer_first` copies done by torch; docs/hicache.md says why), hence
`--hicache-io-backend direct --hicache-mem-layout layer_first`.

What the engine then calls, where SGLang's Scheduler calls it (srt/managers/scheduler.py):

    step start        tree.check_hicache_events()        Scheduler._process_hicache_events,
                      (write/load acks reaped)           first thing in get_next_batch_to_run
    admission         PrefillAdder.add_one_req itself:   schedule_policy.py add_one_req:
                      req.needs_host_load_back() ->      prepare_load_back budget, then
                      tree.init_load_back(...)           init_load_back; req.prefix_len grows
    batch built       tree.ready_to_load_host_cache()    _get_new_batch_prefill_raw, after
                                                         ScheduleBatch.init_new, before
                                                         prepare_for_extend
    extend            split_cached_prefix_by_tier        ScheduleBatch.prepare_for_extend
                      (req.cached_tokens_device/_host)   (the direct path calls it too)

Transfers complete synchronously on the CPU: `start_loading` / the write-through backups
copy with torch on the calling thread (the controller's streams and events are
`torch.cpu`'s), so a load-back's bytes are on the device pool when `ready_to_load_host_cache`
returns; their acks are still reaped by the next `check_hicache_events`, as on a GPU.

The figures (host pool, written / loaded tokens from SGLang's acks, per-tier hits) are read
by the plugin's `HiCacheReader` (engine_adapter/plugin/hicache_reader.py), the same reader a
live server's plugin uses.
"""

from __future__ import annotations

from typing import Any

from engine_adapter.base.errors import InputError

IO_BACKEND, MEM_LAYOUT = "direct", "layer_first"  # the CPU strategy's (hicache_cpu.py)


def hicache_server_args(config) -> dict:
    """The ServerArgs fields of `--enable-hierarchical-cache` for `config` ({} when off)."""
    if config.hicache_ratio is None:
        return {}
    return {"enable_hierarchical_cache": True, "hicache_ratio": float(config.hicache_ratio),
            "hicache_io_backend": IO_BACKEND, "hicache_mem_layout": MEM_LAYOUT,
            "hicache_write_policy": config.hicache_write_policy}


def attach_hicache(tree_cache: Any, server_args: Any, params: Any) -> None:
    """SGLang's `UnifiedRadixCache.init_hicache` on the CPU stack strategy. SGLang's refusal
    (its host-memory check, "Not enough host memory available": this machine's memory, for
    the replay's small K/V bytes per token) becomes a one-line InputError; the traceback
    SGLang's assembler logs before re-raising is held back (its logger, for the call)."""
    import logging

    from engine_adapter.embedded import hicache_cpu

    hicache_cpu.register()
    assembler_log = logging.getLogger("sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler")
    was_disabled, assembler_log.disabled = assembler_log.disabled, True
    try:
        tree_cache.init_hicache(server_args, params)
    except ValueError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        pool, ratio = params.token_to_kv_pool_allocator.size, server_args.hicache_ratio
        raise InputError(f"SGLang refuses a HiCache host pool of {int(pool * ratio):,} tokens "
                         f"({ratio:.4g} x the {pool:,}-token pool): {first}") from None
    finally:
        assembler_log.disabled = was_disabled


def attach_reader(tree_cache: Any):
    """The plugin's HiCacheReader on this tree (None without HiCache); a failed read raises
    (a replay has no caller to report a swallowed error to)."""
    from engine_adapter.plugin.hicache_reader import HiCacheReader

    def _raise(exc: Exception) -> None:
        raise exc

    return HiCacheReader.attach(tree_cache, _raise)


def check_events(tree_cache: Any) -> None:
    """Scheduler._process_hicache_events (no L3 storage): poll write and load acks."""
    if getattr(tree_cache, "cache_controller", None) is not None:
        tree_cache.check_hicache_events()


def start_loading(tree_cache: Any) -> int:
    """_get_new_batch_prefill_raw's `ready_to_load_host_cache()` for a new prefill batch:
    issue the load-backs `init_load_back` queued during admission. Returns the K/V tokens
    this call sent host -> device (0: none queued, or no HiCache), read from the ack
    SGLang's `start_loading` appends for the merged load (managers/cache_controller.py:
    `HiCacheAck.num_tokens_by_pool[anchor]`), the figure the plugin's reader adds to
    `loaded_tokens` when `loading_check` reaps that ack."""
    controller = getattr(tree_cache, "cache_controller", None)
    if controller is None or tree_cache.ready_to_load_host_cache() < 0:
        return 0
    anchor = controller.mem_pool_host.anchor_entry.name.value  # "kv"
    return (controller.ack_load_queue[-1].num_tokens_by_pool or {}).get(anchor, 0)


def split_tiers(req: Any) -> None:
    """prepare_for_extend's per-tier breakdown of a request's cached prefix, computed once on
    its first extend (SGLang's own `split_cached_prefix_by_tier`, same arguments)."""
    if req._cache_breakdown_computed:
        return
    from sglang.srt.managers.schedule_batch import split_cached_prefix_by_tier

    (req.cached_tokens_device, req.cached_tokens_host,
     req.cached_tokens_storage) = split_cached_prefix_by_tier(
        prefix_len=req.prefix_len, host_hit_len=req.materialized_host_hit_len(),
        storage_hit_len=req.storage_hit_length, storage_hit_start=req.storage_hit_start,
        host_hit_is_storage=req.host_hit_is_storage)
    req._cache_breakdown_computed = True

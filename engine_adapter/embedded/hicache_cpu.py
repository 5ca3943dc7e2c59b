"""SGLang's HiCache (`--enable-hierarchical-cache`) on a plain CPU, via SGLang's seams.

Why it exists: SGLang 0.5.23 builds the host pool of a plain MHA device pool in
`hybrid_pool_assembler.build_kv_host_pool`, which constructs `MHATokenToKVPoolHost` without a
`pin_memory` argument (default True). Its buffer then goes through
`pool_host/common.py:alloc_with_host_register` -> `_cuda_host_register` ->
`torch.cuda.cudart()`: "Found no NVIDIA driver" on this machine, and the platform's
`is_pin_memory_available()` is never asked. Past that, the copies between host and device
call `transfer_kv_direct` / `transfer_kv_per_layer` from `sgl_kernel.kvcacheio`, which
`pool_host/mha.py` binds only on CUDA, ROCm or XPU (a NameError anywhere else).

The seam: `hybrid_pool_assembler.register_stack_strategy` ("so downstream forks can plug in
(kvcache, components) combinations"). `CpuHiCacheStrategy` is picked before SGLang's plain-KV
strategy on this platform only, and builds the same stack as `build_kv_only_stack`: one
`HostPoolGroup` anchor entry and SGLang's `HybridCacheController`, with two differences:

  - the host pool is SGLang's `MHATokenToKVPoolHost` with `pin_memory=False` (its own
    constructor parameter), so the buffer is a plain mmap from SGLang's HostTensorAllocator;
  - its two copy methods are the `io_backend == "direct"`, `layout == "layer_first"` branches
    of `MHATokenToKVPoolHost`, with `transfer_kv_direct` done as torch index copies:

        backup (device -> host), all layers      load (host -> device), one layer
        host_k[l][host_idx] = dev_k[l][dev_idx]  dev_k[l][dev_idx] = host_k[l][host_idx]
        host_v[l][host_idx] = dev_v[l][dev_idx]  dev_v[l][dev_idx] = host_v[l][host_idx]

Everything else is SGLang's: `UnifiedRadixCache.init_hicache`, the controller's write and
load queues, acks and layer counters (streams and events are `torch.cpu`'s, which
`get_device_module()` returns here), host slot allocation and eviction, the metrics.
The server therefore needs `--hicache-io-backend direct --hicache-mem-layout layer_first`;
other flags are refused at start-up with that message. L3 storage backends are refused too
(not tried here). Registered from `kvctl.sandbox.cpu_platform.TorchNativeCpuPlatform.init_backend`
(through the kvctl/sandbox/hicache_cpu.py re-export), so in a server it is active only in
`kvctl sandbox`'s and the e2e tests' servers, never in a user's own; and in-process by the
embedded engine's replay (engine_adapter/embedded/hicache.py, `kvctl replay --hicache-ratio`).
It lives here, not in kvctl/sandbox, because engine_adapter never imports kvctl.
"""

from __future__ import annotations

from sglang.srt.mem_cache.hicache_storage import PoolName
from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as assembler
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.pool_host import HostPoolGroup
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.runtime_context import get_memory

IO_BACKEND, MEM_LAYOUT = "direct", "layer_first"


def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices) -> None:
    """Torch-native `sgl_kernel.kvcacheio.transfer_kv_direct`: dst[l][dst_i] = src[l][src_i]."""
    for src, dst in zip(src_layers, dst_layers, strict=True):
        dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)]


class CpuMHATokenToKVPoolHost(MHATokenToKVPoolHost):
    """SGLang's MHA host pool, unpinned, with the direct layer-first copies done by torch."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["pin_memory"] = False
        super().__init__(*args, **kwargs)

    def load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id,
                                 io_backend, *, is_draft: bool = False) -> None:
        # the guard of MHATokenToKVPoolHost.load_to_device_per_layer
        if not is_draft and not 0 <= layer_id < self.target_layer_num:
            return
        transfer_kv_direct([self.k_buffer[layer_id], self.v_buffer[layer_id]],
                           [self.device_k_buffers[layer_id], self.device_v_buffers[layer_id]],
                           host_indices, device_indices)

    def backup_from_device_all_layer(self, device_pool, host_indices, device_indices,
                                     io_backend) -> None:
        transfer_kv_direct(self.device_k_buffers + self.device_v_buffers,
                           self.host_kv_data_refs, device_indices, host_indices)


class CpuHiCacheStrategy(assembler.StackStrategy):
    """The plain-KV HiCache stack (SGLang's `build_kv_only_stack`) with the CPU host pool."""

    def matches(self, kvcache, components) -> bool:
        return type(kvcache) is MHATokenToKVPool and components == {ComponentType.FULL}

    def build(self, *, cache, kvcache, params, server_args, load_cache_event,
              storage_backend=None, storage_backend_extra_config=None, prefetch_threshold=256,
              model_name=None, enable_storage_metrics=False) -> assembler.StackBuildResult:
        memory = get_memory()
        if (memory.hicache_io_backend, memory.hicache_mem_layout) != (IO_BACKEND, MEM_LAYOUT):
            raise ValueError(
                "HiCache on the kvctl CPU platform needs --hicache-io-backend direct "
                f"--hicache-mem-layout layer_first (got {memory.hicache_io_backend}, "
                f"{memory.hicache_mem_layout})")
        if storage_backend is not None:
            raise ValueError("HiCache on the kvctl CPU platform has no L3 storage backend "
                             f"(got --hicache-storage-backend {storage_backend})")
        _, buffer_info, host_kwargs = assembler._mha_host_inputs(kvcache)
        host_pool = CpuMHATokenToKVPoolHost(
            buffer_info, memory.hicache_ratio, memory.hicache_size, params.page_size,
            MEM_LAYOUT, allocator_type=assembler._get_allocator_type(), **host_kwargs)
        layers = kvcache.layer_num
        group = HostPoolGroup([assembler.build_pool_entry(
            name=PoolName.KV, host_pool=host_pool, device_pool=kvcache,
            layer_mapping={i: i for i in range(layers)}, transfer_layer_id_max=layers,
            is_anchor=True)])
        controller = HybridCacheController(
            params.token_to_kv_pool_allocator, group, params.page_size, params.tp_cache_group,
            load_cache_event=load_cache_event, attn_cp_group=params.attn_cp_cache_group,
            attn_tp_group=params.attn_tp_cache_group, pp_group=params.pp_cache_group,
            write_policy=memory.hicache_write_policy, io_backend=IO_BACKEND,
            transfer_layer_id_max=layers, enable_storage_metrics=enable_storage_metrics,
            host_memory_mode=memory.hicache_host_memory_mode)
        return assembler.StackBuildResult(
            host_pool_group=group, cache_controller=controller,
            component_host_pools={ComponentType.FULL: group.get_pool(PoolName.KV)},
            pools_desc="KV (kvctl CPU platform: unpinned host pool, torch-native copies)")


_registered = False


def register() -> None:
    """Put the CPU strategy ahead of SGLang's own (once per process)."""
    global _registered
    if not _registered:
        assembler.register_stack_strategy(CpuHiCacheStrategy())
        _registered = True

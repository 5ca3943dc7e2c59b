"""Import SGLang 0.5.23's cache modules once per process, with the garbage collector paused.

Where start-up goes (cProfile and `python -X importtime` of `kvctl replay --limit 1`,
2026-12-02): everything before the first engine step is imports of about 5,800 modules;
building the pools, allocator and tree takes 0.1 s. Then, at exit, the interpreter's
teardown spends 5-9 s garbage-collecting what those imports allocated.

Why `transformers` is still imported on the direct path. kvctl no longer builds a
ModelConfig there, but the SGLang modules the cache needs import it at module level
(each edge a top-level import in SGLang 0.5.23's source):

    import sglang.<anything> -> sglang/__init__ -> utils.hf_transformers_patches.apply_all
        -> transformers, transformers.models.llama.modeling_llama, ...
    unified_radix_cache -> base_prefix_cache -> observability.metrics_collector
        +-> disaggregation.utils -> configs.model_config -> transformers.PretrainedConfig,
        |       layers.quantization (every method: awq -> layers.linear -> layers.moe ...)
        +-> model_executor.forward_batch_info -> configs.hybrid_arch
                -> sglang.srt.configs (every model's config class) -> transformers.*
    unified_radix_cache -> session.streaming_session -> managers.schedule_batch
        -> constrained.base_grammar_backend -> parser.reasoning_parser
        -> transformers.PreTrainedTokenizerBase
    memory_pool -> configs.mamba_utils -> sglang.srt.configs -> transformers.*
    cache_init_params -> events -> mem_cache.utils -> kernels.ops.kvcache.mla_buffer
        -> kernels.jit.utils -> torch._dynamo, torch._inductor

At run time the direct path is already lean: `runtime_context.publish` does build a
ModelConfig from config.json (SGLang's resolution pipeline, through
cuda_graph_hook.apply_inkling_prefill_cuda_graph_default -> model_config_of), but in
milliseconds once the modules are imported; the whole build takes about 0.1 s.

Measured and rejected: pre-seeding a bare `sglang` package in sys.modules (skipping its
`__init__` and `apply_all`) removes ~100 of ~5,800 modules and no measurable time, because
the other chains import the same transformers modules. Removing transformers altogether
would need stand-ins for eight or more SGLang modules (model_config, reasoning_parser,
hybrid_arch, mamba_utils, ...): replacing SGLang code that the replay's fidelity rests on.
kvctl does not do that.

What this module does instead, at no cost to fidelity (the modules are SGLang's own):

- the garbage collector is paused during the imports: with it on they run ~1,560 young,
  ~140 middle and 9 full collections over a heap growing to ~670,000 tracked objects, about
  2.5 s of CPU on this machine;
- `gc.freeze()` then moves everything alive into the permanent generation, so no later
  collection traverses the imported modules again: neither the replay loop's full
  collections nor the interpreter's teardown (5-9 s -> about 1 s). The cost: cyclic
  garbage that existed at that moment is never collected (a one-off, bounded amount).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import logging
import warnings
from typing import Any, NamedTuple

# SGLang modules the engine's steps import lazily (Req, sampling params, the request helpers
# of mem_cache/common.py and allocation.py, match/evict params, the ScheduleBatch helpers):
# loaded here too so that their import runs with the collector paused and is frozen with the rest.
STEP_MODULES = (
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.mem_cache.common",
    "sglang.srt.mem_cache.allocation",
    "sglang.srt.mem_cache.base_prefix_cache",
    "sglang.srt.mem_cache.radix_cache",
    "sglang.srt.speculative.spec_info",
)


class CacheModules(NamedTuple):
    """The SGLang classes (and torch) that `sglang_runtime.build_components` constructs from."""

    torch: Any
    sglang_version: str
    runtime_context: Any
    ServerArgs: Any
    ReqToTokenPool: Any
    MHATokenToKVPool: Any
    NoOpMHATokenToKVPool: Any
    PagedTokenToKVPoolAllocator: Any
    CacheInitParams: Any
    ComponentType: Any
    UnifiedRadixCache: Any


@contextlib.contextmanager
def collector_paused():
    """Run the block with the cyclic garbage collector off; restores its previous state."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _quiet_sglang() -> None:
    # SGLang warns about GPU-only quantization backends at import; not our user's concern.
    warnings.filterwarnings("ignore", message=".*support.*currently.*")
    logging.getLogger("sglang").setLevel(logging.ERROR)


@functools.cache
def load() -> CacheModules:
    """Import torch and SGLang's cache modules (first call: seconds; later calls: cached),
    then freeze the heap (module docstring). Raises ImportError if SGLang is missing."""
    _quiet_sglang()
    with collector_paused():
        import torch
        from sglang.srt import runtime_context
        from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import (
            MHATokenToKVPool,
            NoOpMHATokenToKVPool,
            ReqToTokenPool,
        )
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.server_args import ServerArgs
        from sglang.version import __version__

        for name in STEP_MODULES:
            importlib.import_module(name)
    gc.freeze()
    return CacheModules(
        torch=torch,
        sglang_version=__version__,
        runtime_context=runtime_context,
        ServerArgs=ServerArgs,
        ReqToTokenPool=ReqToTokenPool,
        MHATokenToKVPool=MHATokenToKVPool,
        NoOpMHATokenToKVPool=NoOpMHATokenToKVPool,
        PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator,
        CacheInitParams=CacheInitParams,
        ComponentType=ComponentType,
        UnifiedRadixCache=UnifiedRadixCache,
    )

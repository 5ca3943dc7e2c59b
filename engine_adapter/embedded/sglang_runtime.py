"""Build SGLang 0.5.23's real scheduler-side KV components on `EngineConfig.device`.

This is the only module that constructs SGLang objects. It imports SGLang lazily, through
`sglang_imports.load()` (seconds the first time; why, and what it does about it, there), and publishes SGLang's runtime context, which the request helpers in
`sglang/srt/mem_cache/common.py` need (`config namespace 'spec' not published` otherwise).

What it builds, exactly as a production SGLang scheduler does for a plain decoder model:

    ReqToTokenPool ----------------------------+
    MHATokenToKVPool | NoOpMHATokenToKVPool    |  (NoOp: capacity only, no bytes)
    PagedTokenToKVPoolAllocator (page 0 = pad) +--> UnifiedRadixCache(tree core rust|python)
                                                     [+ init_hicache: host pool, controller]
    ModelConfig (from a local config.json; only for ScheduleBatch and the tiny model; the
    direct cache path reads the pool geometry from config.json and builds no ModelConfig)

The runtime context is process-wide and last-publish-wins; build one engine at a time per
process (tests build them sequentially).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Any, NamedTuple

from engine_adapter.stdout_lock import STDOUT_LOCK
from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded import sglang_imports
from engine_adapter.embedded.device import resolve_device
from engine_adapter.embedded.hicache import attach_hicache, hicache_server_args
from engine_adapter.base.errors import RuntimeFailure

DEFAULT_MODEL_DIR = Path(__file__).with_name("data")


class SGLangComponents(NamedTuple):
    """The real SGLang objects an embedded engine drives."""

    server_args: Any
    model_config: Any  # None on the direct path (built only for ScheduleBatch / the tiny model)
    req_to_token_pool: Any
    kv_pool: Any
    allocator: Any
    tree_cache: Any
    sglang_version: str


_redirected = threading.local()  # .active: this thread's fd 1 already points at stderr


@contextlib.contextmanager
def stdout_to_stderr():
    """SGLang prints its whole radix tree to fd 1 when an allocation fails (the Rust core
    writes there directly). kvctl's stdout carries `--json` documents, so allocation calls
    run with fd 1 pointed at stderr, under the process-wide stdout lock.

    Nested use in the thread that holds the redirect costs nothing (no flush, no dup2): a
    replay holds one redirect around its whole loop (kvctl.replay.runner.run) instead of
    paying six system calls per allocation, about 45,000 times in the full shipped trace."""
    if getattr(_redirected, "active", False):
        yield
        return
    with STDOUT_LOCK:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            _redirected.active = True
            with contextlib.redirect_stdout(sys.stderr):
                yield
            sys.stdout.flush()
        finally:
            _redirected.active = False
            os.dup2(saved, 1)
            os.close(saved)


def _pool_geometry(model_dir: Path) -> tuple[int, int, int]:
    """(KV heads, head dim, layers) from a config.json, as ModelConfig derives them for
    a plain decoder at TP 1 (head_dim defaults to hidden_size / attention heads)."""
    import json

    try:
        cfg = json.loads((model_dir / "config.json").read_text())
        heads = int(cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
        return int(cfg.get("num_key_value_heads", heads)), head_dim, int(cfg["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise RuntimeFailure(f"{model_dir}/config.json: cannot read the KV geometry ({err})") from None


def build_components(config: EngineConfig) -> SGLangComponents:
    """Construct pools, allocator and tree for `config`. Raises RuntimeFailure if SGLang is
    missing or refuses the configuration."""
    config.validate()
    if config.device != "cpu":
        resolve_device(config.device)  # InputError, not a CUDA traceback, without a GPU
    try:
        sg = sglang_imports.load()  # gc paused during the imports, heap frozen after
    except ImportError as err:  # pragma: no cover - depends on the installation
        raise RuntimeFailure(f"SGLang 0.5.23 is not importable ({err}); run `make setup`") from None
    torch = sg.torch

    if config.device == "cpu":  # SGLang's CPU extend kernel, vectorized (alloc_kernel.py)
        from engine_adapter.embedded.alloc_kernel import install

        install()
    # One torch thread: the CPU pool ops are small and a second thread only contends
    # (replay sweeps parallelize across processes instead).
    torch.set_num_threads(1)
    model_dir = Path(config.tiny_model).parent if config.tiny_model else DEFAULT_MODEL_DIR
    server_args = sg.ServerArgs(
        model_path=str(model_dir),
        device=config.device,
        skip_tokenizer_init=True,
        page_size=config.page_size,
        radix_eviction_policy=config.eviction_policy,
        radix_eviction_policy_config=config.policy_config(),
        # Read back through get_schedule() by SchedulePolicy, PrefillAdder, the retraction
        # order and NewTokenRatioTracker (sched_round.py): the server's flags, published.
        schedule_policy=config.schedule_policy,
        chunked_prefill_size=config.token_budget,
        max_prefill_tokens=config.max_prefill_tokens,
        max_running_requests=config.max_running_requests,
        **hicache_server_args(config),  # --enable-hierarchical-cache ... (hicache.py)
    )
    sg.runtime_context.publish(server_args, role="scheduler")
    model_config = None
    if config.uses_batches:  # ScheduleBatch and the tiny model read SGLang's ModelConfig
        with sglang_imports.collector_paused():
            from sglang.srt.configs.model_config import ModelConfig
        model_config = ModelConfig.from_server_args(server_args)
        head_num = model_config.get_num_kv_heads(1)
        head_dim = model_config.head_dim
        layer_num = model_config.num_hidden_layers
    else:  # the direct path needs only the pool geometry (no HF config load, no ModelConfig)
        head_num, head_dim, layer_num = _pool_geometry(model_dir)
    pool_cls = sg.MHATokenToKVPool if config.kv_pool == "mha" else sg.NoOpMHATokenToKVPool
    req_to_token_pool = sg.ReqToTokenPool(
        size=config.max_running_requests,
        max_context_len=config.max_context_len,
        device=config.device,
        enable_memory_saver=False,
    )
    kv_pool = pool_cls(
        size=config.pool_tokens,
        page_size=config.page_size,
        dtype=torch.float32,
        head_num=head_num,
        head_dim=head_dim,
        layer_num=layer_num,
        device=config.device,
        enable_memory_saver=False,
    )
    allocator = sg.PagedTokenToKVPoolAllocator(
        size=config.pool_tokens,
        page_size=config.page_size,
        dtype=torch.float32,
        device=config.device,
        kvcache=kv_pool,
        need_sort=config.need_sort(),
    )
    params = sg.CacheInitParams(
        disable=False,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=config.page_size,
        tree_components=(sg.ComponentType.FULL,),
        eviction_policy=config.eviction_policy,
        eviction_policy_config=config.policy_config(),
        enable_kv_cache_events=config.enable_kv_events,
        tree_core_backend=config.tree_core,
    )
    try:
        tree_cache = sg.UnifiedRadixCache(params=params)
    except Exception as err:  # SGLang rejects e.g. a policy the core does not support
        raise RuntimeFailure(f"SGLang refused the cache configuration: {err}") from None
    if config.hicache_ratio is not None:  # UnifiedRadixCache.init_hicache, SGLang's stack
        attach_hicache(tree_cache, server_args, params)
    if tree_cache._tree_core_backend != config.tree_core:
        raise RuntimeFailure(
            f"SGLang selected the {tree_cache._tree_core_backend} tree core instead of "
            f"{config.tree_core} (torch version or platform unsupported by the Rust core)"
        )
    return SGLangComponents(
        server_args=server_args,
        model_config=model_config,
        req_to_token_pool=req_to_token_pool,
        kv_pool=kv_pool,
        allocator=allocator,
        tree_cache=tree_cache,
        sglang_version=sg.sglang_version,
    )

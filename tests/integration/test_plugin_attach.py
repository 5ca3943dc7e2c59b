"""Attaching to a scheduler: which rank reports and on which port (`attach_from_runtime_context`
reads SGLang's own parallel context, set here by scoped overrides of `get_parallel()` as a
launcher would publish it), and the eviction probe's failure isolation. Hosts are
scheduler-shaped objects over real SGLang components (plugin_support.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine_adapter.plugin.attach import attach_from_runtime_context
from engine_adapter.plugin.hooks import RUNTIME_ATTR
from plugin_support import EngineShapedScheduler

pytestmark = pytest.mark.integration


def _free_port() -> int:
    """Below the ephemeral range, where no outgoing connection can take it first."""
    from kvctl.sandbox.ports import free_block

    return free_block(1)


def test_dp_rank_two_serves_on_base_plus_two(make_engine):
    """Attention-TP rank 0 of DP replica 2 attaches and serves on KVCTL_PLUGIN_PORT + 2."""
    from sglang.srt.runtime_context import get_parallel

    host = EngineShapedScheduler(make_engine(pool_tokens=1024, page_size=16))
    port = _free_port()
    env = {"KVCTL_PLUGIN_PORT": str(port - 2)}
    with get_parallel().override(attn_tp_rank=0, attn_cp_rank=0, pp_rank=0, attn_dp_rank=0,
                                 dp_rank=2):
        runtime = attach_from_runtime_context(host, env)
    try:
        assert runtime.dp_rank == 2
        assert runtime.server.url == f"http://127.0.0.1:{port}"
        assert getattr(host, RUNTIME_ATTR) is runtime
    finally:
        runtime.server.close()


def test_attention_tp_rank_one_does_not_report(make_engine):
    """A non-zero attention-TP rank shares rank 0's cache: nothing attaches, no port."""
    from sglang.srt.runtime_context import get_parallel

    host = EngineShapedScheduler(make_engine(pool_tokens=1024, page_size=16))
    # a consistent TP=2 topology (SGLang validates it): this process is TP rank 1
    with get_parallel().override(tp_size=2, attn_tp_size=2, moe_tp_size=2, tp_rank=1,
                                 attn_tp_rank=1, attn_cp_rank=0, pp_rank=0, attn_dp_rank=0,
                                 dp_rank=None):
        assert attach_from_runtime_context(host, {"KVCTL_PLUGIN_PORT": "1"}) is None
    assert getattr(host, RUNTIME_ATTR, None) is None


def test_eviction_probe_failure_never_reaches_sglang(sglang_ready, monkeypatch):
    """The plugin's probe on a real UnifiedRadixCache: when reading the eviction's numbers
    raises (here `protected_size`), SGLang's evict still returns its result and the plugin
    counts one failure."""
    import numpy as np
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.sglang_runtime import build_components
    from engine_adapter.plugin.attach import attach
    from engine_adapter.plugin.settings import PluginSettings

    sg = build_components(EngineConfig(pool_tokens=1024, page_size=16, max_context_len=1024))
    host = SimpleNamespace(tree_cache=sg.tree_cache, token_to_kv_pool_allocator=sg.allocator,
                           req_to_token_pool=sg.req_to_token_pool, server_args=sg.server_args)
    runtime = attach(host, PluginSettings(), dp_rank=0, serve=False)
    _cache_one_page(sg, np.arange(1, 17))
    evictable = sg.tree_cache.evictable_size()

    def broken():
        raise RuntimeError("size getter changed")

    monkeypatch.setattr(sg.tree_cache, "protected_size", broken)
    result = sg.tree_cache.evict(EvictParams(num_tokens=evictable))
    assert result.num_tokens_evicted == evictable == 16
    assert runtime.failures == 1 and runtime.tally.evictions == 0


def _cache_one_page(sg, tokens) -> None:
    """Insert one page of `tokens` into the tree through SGLang's own insert."""
    from array import array

    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    slots = sg.allocator.alloc(len(tokens))
    sg.tree_cache.insert(InsertParams(key=RadixKey(array("q", map(int, tokens))),
                                      value=torch.as_tensor(slots)))

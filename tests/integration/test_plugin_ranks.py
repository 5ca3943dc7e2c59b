"""Which scheduler reports, and on which port: `attach_from_runtime_context` reads SGLang's
own parallel context (scoped overrides of `get_parallel()`, as a launcher would publish)
on a scheduler-shaped host of the embedded engine's real objects (plugin_support.py)."""

from __future__ import annotations

import socket

import pytest

from engine_adapter.plugin.attach import attach_from_runtime_context
from engine_adapter.plugin.hooks import RUNTIME_ATTR
from plugin_support import EngineShapedScheduler

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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

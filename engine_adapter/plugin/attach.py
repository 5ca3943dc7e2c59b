"""Attach kvctl to one scheduler: decide whether this rank reports, capture its cache
objects, install the eviction probe, start the endpoint.

Only the rank that owns a cache reports: attention-TP rank 0 (and attention-CP rank 0,
pipeline stage 0) of each DP rank. The DP index is SGLang's own KV-event publisher rule
(`select_kv_publisher_dp_rank`: the attention-DP rank under DP attention, else the replica),
so the plugin's port is `KVCTL_PLUGIN_PORT + index`, like the KV-event endpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from engine_adapter.instrument.probes import install_eviction_probe
from engine_adapter.plugin.runtime import PluginRuntime
from engine_adapter.plugin.server import PluginServer
from engine_adapter.plugin.settings import RUNTIME_ATTR, PluginSettings
from engine_adapter.snapshot import EngineInfo

logger = logging.getLogger("kvctl.plugin")


def attach_from_runtime_context(scheduler: Any, environ: Mapping[str, str]) -> PluginRuntime | None:
    """The `Scheduler.__init__` AFTER hook: attach when this process is a reporting rank."""
    from sglang.srt.disaggregation.kv_events import select_kv_publisher_dp_rank
    from sglang.srt.runtime_context import get_parallel

    parallel = get_parallel()
    for rank in ("attn_tp_rank", "attn_cp_rank", "pp_rank"):
        if (getattr(parallel, rank, 0) or 0) != 0:
            return None  # another rank of this DP rank's cache reports
    dp_index = select_kv_publisher_dp_rank(parallel.attn_dp_size, parallel.attn_dp_rank,
                                           parallel.dp_rank)
    return attach(scheduler, PluginSettings.from_env(environ), dp_rank=dp_index)


def attach(scheduler: Any, settings: PluginSettings, *, dp_rank: int,
           serve: bool = True) -> PluginRuntime:
    """Attach to a scheduler-shaped object (the attribute names SGLang's Scheduler has).
    serve=False: no endpoint (benchmarks). A port that cannot be bound disables the plugin
    (it says so in the log; nothing else of the server changes)."""
    runtime = PluginRuntime(scheduler, settings, dp_rank=dp_rank, info=engine_info(scheduler))
    if serve:
        if refusal := settings.bind_refusal():  # item 4 of issue 26: safe by default
            runtime.disabled_reason = refusal
            logger.error("kvctl plugin: %s", refusal)
            return runtime
        if warning := settings.exposure_warning():
            logger.warning("kvctl plugin: %s", warning)
        try:
            runtime.server = PluginServer(runtime, settings.host, settings.port(dp_rank))
        except OSError as exc:
            runtime.disabled_reason = (f"cannot serve on {settings.host}:"
                                       f"{settings.port(dp_rank)}: {exc}")
            logger.error("kvctl plugin: %s", runtime.disabled_reason)
            return runtime
        logger.info("kvctl plugin: serving DP rank %d on %s", dp_rank, runtime.server.url)
    install_eviction_probe(scheduler.tree_cache, runtime.on_evict, on_error=runtime.evict_failed)
    setattr(scheduler, RUNTIME_ATTR, runtime)
    return runtime


def engine_info(scheduler: Any) -> EngineInfo:
    """Static facts of the scheduler's cache, for the Prometheus info metric."""
    import sglang

    allocator = scheduler.token_to_kv_pool_allocator
    tree = scheduler.tree_cache
    server_args = getattr(scheduler, "server_args", None)
    kvcache = allocator.get_kvcache() if hasattr(allocator, "get_kvcache") else None
    return EngineInfo(
        engine="plugin",
        tree_core=str(getattr(tree, "_tree_core_backend", "unknown")),
        page_size=allocator.page_size,
        eviction_policy=str(getattr(server_args, "radix_eviction_policy", "") or ""),
        pool_tokens=allocator.size,
        kv_pool=type(kvcache).__name__ if kvcache is not None else "unknown",
        sglang_version=getattr(sglang, "__version__", "unknown"),
        model=str(getattr(server_args, "served_model_name", None) or ""),
        bytes_per_token=None,
    )

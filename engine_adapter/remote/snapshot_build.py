"""Turn what a remote attach observes into the engine-neutral `Snapshot` (pure).

Inputs: the server info, one metrics reading, and (when the KV-event stream is attached)
the stream's counters and the mirror's shape. What a remote attach cannot observe is
`None` where the contract allows it and listed in `NOT_OBSERVABLE` otherwise (see the
notes each snapshot carries); nothing is estimated.
"""

from __future__ import annotations

import dataclasses

from engine_adapter.funnel import (
    REJECTION_REASONS,
    STAGES,
    Funnel,
    FunnelStage,
    PrefixLengths,
    Rejection,
)
from engine_adapter.remote.event_stream import StreamStats
from engine_adapter.remote.metrics_scrape import MetricsReading, MetricsUnavailable
from engine_adapter.remote.mirror_shape import MirrorShape
from engine_adapter.remote.server_info import ServerInfo
from engine_adapter.remote.wire import GPU
from engine_adapter.snapshot import (
    Alert,
    Counters,
    EngineInfo,
    PoolLedger,
    RefReconciliation,
    Snapshot,
    TreeStats,
)

# What a remote snapshot cannot observe (all None in the snapshot), said in its notes.
NOT_OBSERVABLE = (
    "ledger.protected_tokens / private_tokens (None): lock refs and request-private slots "
    "live inside the scheduler",
    "refs (None): per-request leases and per-node lock_ref",
    "funnel stages authorized..snapshot_current (None); executed_hits as tokens only",
    "mapping (None): host-tier load-back progress is not exported",
    "counters.steps, requests_submitted, allocation_failures, locked_eviction_rejects, "
    "admission_deferrals, mapping stalls (None): SGLang 0.5.23 exports no such series",
)
NO_EVENTS_NOTE = "tree (None): no KV-event stream attached (--kv-events-config not set?)"
# KV events name media as SGLang's StorageMedium; snapshots use the embedded engine's words.
MEDIUM_NAMES = {"GPU": "device", "CPU_PINNED": "host", "DISK": "disk", "EXTERNAL": "external"}

_POOL_GAUGES = (
    "sglang:kv_available_tokens",
    "sglang:kv_evictable_tokens",
    "sglang:kv_used_tokens",
)


def build_snapshot(
    *,
    seq: int,
    attached_s: float,
    wall_time_s: float,
    info: ServerInfo,
    metrics: MetricsReading,
    stream: StreamStats | None,
    shape: MirrorShape | None,
    alerts: tuple[Alert, ...] = (),
    notes: tuple[str, ...] = (),
) -> Snapshot:
    """One connected snapshot. Raises MetricsUnavailable when the pool gauges are missing."""
    ledger = build_ledger(info, metrics)
    tree_notes = (
        (
            f"tree: mirrored from KV events, {shape.blocks} pages; radix node count "
            "(tree.nodes) is not observable remotely",
        )
        if shape is not None
        else (NO_EVENTS_NOTE,)
    )
    return Snapshot(
        seq=seq,
        virtual_time_s=attached_s,  # no virtual clock remotely: seconds since attach
        wall_time_s=wall_time_s,
        info=EngineInfo(
            engine="remote",
            tree_core="remote",
            page_size=info.page_size,
            eviction_policy=info.eviction_policy,
            pool_tokens=ledger.pool_tokens,
            kv_pool="remote",
            sglang_version=info.version,
            model=info.model,
        ),
        ledger=ledger,
        funnel=build_funnel(metrics),
        refs=RefReconciliation(
            leases=None,
            recorded_protected_tokens=None,
            derived_protected_tokens=None,
            nodes_checked=None,
            per_node=False,
        ),
        mapping=None,  # host-tier load-back lag is not published
        counters=build_counters(metrics, stream),
        tree=_tree(shape),
        alerts=alerts,
        connected=True,
        notes=notes + tree_notes + NOT_OBSERVABLE,
    )


def build_ledger(info: ServerInfo, metrics: MetricsReading) -> PoolLedger:
    missing = [name for name in _POOL_GAUGES if metrics.count(name) is None]
    pool = metrics.count("sglang:max_total_num_tokens") or info.max_total_num_tokens
    if missing or pool is None:
        raise MetricsUnavailable(
            f"/metrics lacks {', '.join(missing) or 'sglang:max_total_num_tokens'}: start "
            "SGLang with --enable-metrics (the gauges appear once it has logged stats)"
        )
    return PoolLedger(
        page_size=info.page_size,
        pool_tokens=pool,
        free_tokens=metrics.count("sglang:kv_available_tokens"),
        evictable_tokens=metrics.count("sglang:kv_evictable_tokens"),
        used_tokens=metrics.count("sglang:kv_used_tokens"),
        protected_tokens=None,
        private_tokens=None,
        host_tokens=metrics.count("sglang:hicache_host_used_tokens") or 0,
        host_capacity_tokens=metrics.count("sglang:hicache_host_total_tokens"),
    )


def build_funnel(metrics: MetricsReading) -> Funnel:
    """`requests` (finished requests, prompt tokens) and `executed_hits` tokens; rest None."""
    requests = metrics.count("sglang:num_requests_total") or 0
    prompt = metrics.count("sglang:prompt_tokens_total") or 0
    cached = metrics.count("sglang:cached_tokens_total") or 0
    stages = []
    for name in STAGES:
        if name == "requests":
            stages.append(FunnelStage(name=name, requests=requests, tokens=prompt))
        elif name == "executed_hits":
            stages.append(FunnelStage(name=name, requests=None, tokens=cached))
        else:
            stages.append(FunnelStage(name=name, requests=None, tokens=None))
    return Funnel(
        stages=tuple(stages),
        rejections=tuple(
            Rejection(reason=r, requests=None, tokens=None) for r in REJECTION_REASONS
        ),
        # seed 000 0x07A: S_cap = S_prompt - 1 per request, so the sum is prompt - requests.
        lengths=PrefixLengths(
            prompt=prompt,
            semantic=None,
            indexed=None,
            cap=max(0, prompt - requests),
            runtime=cached,
        ),
    )


def build_counters(metrics: MetricsReading, stream: StreamStats | None) -> Counters:
    def total(name: str, where: dict[str, str] | None = None) -> int:
        return metrics.count(name, where=where) or 0  # an absent counter was never incremented

    prompt, cached = total("sglang:prompt_tokens_total"), total("sglang:cached_tokens_total")
    return Counters(
        requests_finished=total("sglang:num_requests_total"),
        prompt_tokens=prompt,
        hit_tokens=cached,
        recomputed_tokens=max(0, prompt - cached),
        decode_tokens=total("sglang:generation_tokens_total"),
        evictions=total("sglang:eviction_duration_seconds_count"),
        evicted_tokens=total("sglang:evicted_tokens_total"),
        retractions=total("sglang:num_retracted_requests_total"),
        retracted_tokens=total("sglang:num_retracted_input_tokens_total")
        + total("sglang:num_retracted_output_tokens_total"),
        offload_bytes=total("sglang:hicache_backup_bytes_total"),
        reload_bytes=total("sglang:load_back_bytes_total"),
        offloaded_tokens=total("sglang:hicache_backup_tokens_total", {"pool": "kv"}),
        reloaded_tokens=total("sglang:load_back_tokens_total", {"pool": "kv"}),
        kv_events=stream.events_applied if stream is not None else 0,
        **{name: None for name in _UNOBSERVED_COUNTERS},
    )


# Counters SGLang 0.5.23 exports no series for: not observable remotely, never zero.
_UNOBSERVED_COUNTERS = (
    "steps", "requests_submitted", "allocation_failures", "locked_eviction_rejects",
    "admission_deferrals", "mapping_stalls", "mapping_stall_seconds",
)


def _tree(shape: MirrorShape | None) -> TreeStats:
    if shape is None:
        return TreeStats(nodes=None, cached_tokens=None)  # no event stream: not observable
    return TreeStats(
        nodes=None,  # events carry pages; radix node boundaries are not published
        cached_tokens=shape.tokens(GPU),
        max_depth_tokens=shape.max_depth_tokens if shape.depth_exact else None,
        leaves=shape.leaves,  # one leaf page per leaf node
        tokens_by_medium=tuple(
            (MEDIUM_NAMES.get(medium, medium.lower()), tokens)
            for medium, tokens in shape.tokens_by_medium
        ),
    )


def disconnected_snapshot(
    *, seq: int, attached_s: float, wall_time_s: float, last: Snapshot | None, alert: Alert
) -> Snapshot:
    """The last connected read marked stale, or a placeholder when there never was one."""
    if last is not None:
        return dataclasses.replace(
            last, seq=seq, virtual_time_s=attached_s, wall_time_s=wall_time_s,
            connected=False, alerts=(alert,),
            notes=("disconnected: numbers are from the last successful read",) + last.notes,
        )  # fmt: skip
    zero = Funnel(
        stages=tuple(FunnelStage(name=s, requests=None, tokens=None) for s in STAGES),
        rejections=tuple(
            Rejection(reason=r, requests=None, tokens=None) for r in REJECTION_REASONS
        ),
        lengths=PrefixLengths(semantic=None, indexed=None),
    )
    return Snapshot(
        seq=seq,
        virtual_time_s=attached_s,
        wall_time_s=wall_time_s,
        info=EngineInfo(
            engine="remote",
            tree_core="remote",
            page_size=1,
            eviction_policy="",
            pool_tokens=0,
            kv_pool="remote",
            sglang_version="",
        ),  # fmt: skip
        ledger=PoolLedger(
            page_size=1,
            pool_tokens=0,
            free_tokens=0,
            evictable_tokens=0,
            used_tokens=0,
            protected_tokens=None,
            private_tokens=None,
        ),  # fmt: skip
        funnel=zero,
        refs=RefReconciliation(
            leases=None,
            recorded_protected_tokens=None,
            derived_protected_tokens=None,
            nodes_checked=None,
            per_node=False,
        ),  # fmt: skip
        mapping=None,
        counters=Counters(**{name: None for name in _UNOBSERVED_COUNTERS}),
        tree=TreeStats(nodes=None, cached_tokens=None),
        alerts=(alert,),
        connected=False,
        notes=("never connected: every number is a placeholder, not a reading",),
    )

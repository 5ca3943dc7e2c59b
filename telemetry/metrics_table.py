"""Every Prometheus metric family kvctl exports, defined once, and how each reads a Snapshot.

The collector (`telemetry.collector`) walks `METRICS` on every scrape; dashboards, alert rules
and tests name metrics only through this table. Naming follows Prometheus rules: the `kvctl_`
prefix, counters end in `_total`, units in the name (`_tokens`, `_bytes`, `_seconds`, `_ratio`).

Reading rule (engine_adapter/snapshot.py): a quantity the engine cannot observe is `None`, and
then the sample is left out, never exported as 0. Counter readers return totals since engine
start (the engine's own cumulative counts); Prometheus' `rate()` handles restarts.

A reader returns `Sample`s: label values in the order of `MetricSpec.labels`, and a value
(`None` = not observable, dropped by the collector). An info family has one sample whose
label values are the info fields. `read=None` marks the two families the collector writes
itself (`kvctl_up`, `kvctl_snapshot_read_seconds`): they describe the read, not the engine.
"""

from __future__ import annotations

from collections import Counter as _Tally
from typing import Callable, Iterable

from engine_adapter.snapshot import Snapshot
from telemetry.fleet_metrics import FLEET_METRICS
from telemetry.hicache_metrics import HICACHE_ROWS
from telemetry.metric_spec import MetricSpec, Sample  # defined there, read from here too
from telemetry.whatif_metrics import WHATIF_METRICS

# States a RequestView can be in (engine_adapter/snapshot.py); anything else counts as "other".
REQUEST_STATES: tuple[str, ...] = (
    "waiting", "prefill", "running", "retained", "offloaded", "reloading", "finished", "other",
)
POOL_STATES: tuple[str, ...] = ("free", "evictable", "protected", "private")
PREFIX_LENGTHS: tuple[str, ...] = ("prompt", "semantic", "indexed", "cap", "runtime")
INFO_LABELS: tuple[str, ...] = (
    "engine", "tree_core", "page_size", "eviction_policy", "pool_tokens", "kv_pool",
    "sglang_version", "model",
)


def _one(value_of: Callable[[Snapshot], float | int | bool | None]):
    """A reader for an unlabelled family."""

    def read(snapshot: Snapshot) -> Iterable[Sample]:
        value = value_of(snapshot)
        return (Sample((), None if value is None else float(value)),)

    return read


def _gauge(name: str, help: str, value_of) -> MetricSpec:
    return MetricSpec(name=name, kind="gauge", help=help, read=_one(value_of))


def _counter(name: str, help: str, value_of) -> MetricSpec:
    return MetricSpec(name=name, kind="counter", help=help, read=_one(value_of))


def _pool_states(s: Snapshot) -> Iterable[Sample]:
    ledger = s.ledger
    values = (ledger.free_tokens, ledger.evictable_tokens, ledger.protected_tokens,
              ledger.private_tokens)
    return (Sample((state,), v) for state, v in zip(POOL_STATES, values, strict=True))


def _server_pool(s: Snapshot) -> Iterable[Sample]:
    # SGLang's own gauges, kept beside the plugin's sample (snapshot.py `server_ledger`)
    led = s.server_ledger
    if led is None:
        return ()
    return (Sample((state,), v) for state, v in (
        ("capacity", led.pool_tokens), ("free", led.free_tokens),
        ("evictable", led.evictable_tokens), ("used", led.used_tokens)))


def _rank_pool(s: Snapshot) -> Iterable[Sample]:
    for rank, led in enumerate(s.rank_ledgers):
        values = (led.pool_tokens, led.free_tokens, led.evictable_tokens,
                  led.protected_tokens, led.private_tokens)
        for state, v in zip(("capacity",) + POOL_STATES, values, strict=True):
            yield Sample((str(rank), state), v)


def _funnel_stages(field: str):
    def read(s: Snapshot) -> Iterable[Sample]:
        return (Sample((st.name,), getattr(st, field)) for st in s.funnel.stages)

    return read


def _funnel_rejections(field: str):
    def read(s: Snapshot) -> Iterable[Sample]:
        return (Sample((r.reason,), getattr(r, field)) for r in s.funnel.rejections)

    return read


def _prefix_lengths(s: Snapshot) -> Iterable[Sample]:
    lengths = s.funnel.lengths
    return (Sample((name,), getattr(lengths, name)) for name in PREFIX_LENGTHS)


def _request_states(s: Snapshot) -> Iterable[Sample]:
    tally = _Tally(r.state if r.state in REQUEST_STATES else "other" for r in s.requests)
    return (Sample((state,), tally[state]) for state in REQUEST_STATES)


def _namespace_requests(s: Snapshot) -> Iterable[Sample]:
    tally = _Tally(r.namespace for r in s.requests if r.state != "finished")
    return (Sample((ns,), n) for ns, n in sorted(tally.items()))


def _engine_info(s: Snapshot) -> Iterable[Sample]:
    i = s.info
    values = (i.engine, i.tree_core, str(i.page_size), i.eviction_policy, str(i.pool_tokens),
              i.kv_pool, i.sglang_version, i.model)
    return (Sample(tuple(values), 1.0),)


def _alerts(s: Snapshot) -> Iterable[Sample]:
    # Only active alerts are in a snapshot; one that cleared simply has no sample any more.
    return (Sample((a.name, a.severity), 1.0) for a in s.alerts)


def _host_capacity(s: Snapshot) -> int | None:
    return s.ledger.host_capacity_tokens


def _delta_ref_nodes(s: Snapshot) -> int | None:
    # Per-node lock refs are only readable on some tree cores (RefReconciliation.per_node).
    return len(s.refs.off_nodes) if s.refs.per_node else None


def _medium_tokens(s: Snapshot) -> Iterable[Sample]:
    return (Sample((medium,), tokens) for medium, tokens in s.tree.tokens_by_medium)



METRICS: tuple[MetricSpec, ...] = (
    # -- the read itself
    MetricSpec(name="kvctl_up", kind="gauge",
               help="1 when the last snapshot read succeeded and its source is connected; 0 when "
                    "the read raised or the source is down (then no reading is exported)."),
    MetricSpec(name="kvctl_snapshot_read_seconds", kind="gauge",
               help="Wall seconds the last snapshot read took (exporter side)."),
    _gauge("kvctl_connected", "1 when the engine is reachable (remote attach), else 0.",
           lambda s: s.connected),
    _gauge("kvctl_snapshot_sequence", "Sequence number of the snapshot served.", lambda s: s.seq),
    _gauge("kvctl_virtual_time_seconds", "Engine virtual clock (modeled seconds).",
           lambda s: s.virtual_time_s),
    MetricSpec(name="kvctl_engine_info", kind="info", help="Static description of the engine.",
               labels=INFO_LABELS, read=_engine_info),
    _gauge("kvctl_kv_cell_size_bytes", "KV cache bytes per token, all layers (SGLang cell_size).",
           lambda s: s.info.bytes_per_token),
    # -- pool ledger, seed 000 0x0CF: N_pool = free + evictable + protected + private
    _gauge("kvctl_pool_capacity_tokens", "KV pool size in token slots (N_pool).",
           lambda s: s.ledger.pool_tokens),
    MetricSpec(name="kvctl_pool_tokens", kind="gauge", labels=("state",), read=_pool_states,
               help="Pool token slots by ledger state (free, evictable, protected, private)."),
    MetricSpec(name="kvctl_sglang_pool_tokens", kind="gauge", labels=("state",),
               read=_server_pool,
               help="SGLang's own /metrics pool gauges (capacity, free, evictable, used), "
                    "exported beside kvctl_pool_tokens when that is the kvctl plugin's "
                    "sample; they refresh only when SGLang's scheduler logs a batch."),
    MetricSpec(name="kvctl_rank_pool_tokens", kind="gauge", labels=("dp_rank", "state"),
               read=_rank_pool,
               help="Per data-parallel rank: the plugin's pool sample (capacity, free, "
                    "evictable, protected, private); kvctl_pool_tokens is their sum."),
    _gauge("kvctl_pool_used_tokens", "Token slots SGLang calls used (sglang:kv_used_tokens).",
           lambda s: s.ledger.used_tokens),
    _gauge("kvctl_pool_residual_tokens",
           "Slots accounted to nobody: N_pool - (free + evictable + used); a leak when > 0.",
           lambda s: s.ledger.residual_tokens),
    _gauge("kvctl_pool_tail_tokens",
           "Allocated but unwritten slots in requests' last pages (seed 000 0x02G).",
           lambda s: s.ledger.tail_slots),
    _gauge("kvctl_host_pool_tokens", "Tokens held in the host (offload) tier.",
           lambda s: s.ledger.host_tokens),
    _gauge("kvctl_host_pool_capacity_tokens", "Host tier capacity in tokens.", _host_capacity),
    _gauge("kvctl_kv_utilization_ratio",
           "U_KV = allocated / total slots, evictable counted as allocated (seed 003 eq. 8).",
           lambda s: s.ledger.u_kv),
    _gauge("kvctl_sglang_token_usage_ratio",
           "SGLang token_usage: (N_pool - free - evictable) / N_pool (hides evictable).",
           lambda s: s.ledger.token_usage),
    _gauge("kvctl_prefix_hit_ratio",
           "H_prefix since engine start: sum S_match / sum S_prompt (seed 003 eq. 2).",
           lambda s: s.hit_rate),
    # -- prefix-hit funnel, seed 000 0x0CF (totals since engine start)
    MetricSpec(name="kvctl_funnel_requests_total", kind="counter", labels=("stage",),
               read=_funnel_stages("requests"), help="Requests that reached each funnel stage."),
    MetricSpec(name="kvctl_funnel_tokens_total", kind="counter", labels=("stage",),
               read=_funnel_stages("tokens"),
               help="Prefix tokens still claimable at each funnel stage."),
    MetricSpec(name="kvctl_funnel_rejections_total", kind="counter", labels=("reason",),
               read=_funnel_rejections("requests"),
               help="Requests that left the funnel, by rejection bucket."),
    MetricSpec(name="kvctl_funnel_rejected_tokens_total", kind="counter", labels=("reason",),
               read=_funnel_rejections("tokens"),
               help="Prefix tokens lost between funnel stages, by rejection bucket."),
    MetricSpec(name="kvctl_prefix_length_tokens_total", kind="counter", labels=("length",),
               read=_prefix_lengths,
               help="Sums of the seed 000 0x07A prefix lengths (S_prompt, S_sem, S_indexed, "
                    "S_cap, S_runtime) over admitted requests."),
    # -- engine counters (totals since engine start)
    _counter("kvctl_steps_total", "Scheduler steps.", lambda s: s.counters.steps),
    _counter("kvctl_requests_submitted_total", "Requests submitted.",
             lambda s: s.counters.requests_submitted),
    _counter("kvctl_requests_finished_total", "Requests finished.",
             lambda s: s.counters.requests_finished),
    _counter("kvctl_prompt_tokens_total", "Prompt tokens admitted.",
             lambda s: s.counters.prompt_tokens),
    _counter("kvctl_hit_tokens_total", "Prompt tokens served from the prefix cache.",
             lambda s: s.counters.hit_tokens),
    _counter("kvctl_recomputed_tokens_total", "Prompt tokens prefilled (not served from cache).",
             lambda s: s.counters.recomputed_tokens),
    _counter("kvctl_decode_tokens_total", "Tokens decoded.", lambda s: s.counters.decode_tokens),
    _counter("kvctl_evictions_total", "Tree eviction calls that freed tokens.",
             lambda s: s.counters.evictions),
    _counter("kvctl_evicted_tokens_total", "Tokens evicted from the tree.",
             lambda s: s.counters.evicted_tokens),
    _counter("kvctl_retractions_total", "Requests retracted (preempted) to free memory.",
             lambda s: s.counters.retractions),
    _counter("kvctl_retracted_tokens_total", "Tokens freed by retractions.",
             lambda s: s.counters.retracted_tokens),
    _counter("kvctl_allocation_failures_total", "Allocations that failed even after eviction.",
             lambda s: s.counters.allocation_failures),
    _counter("kvctl_locked_eviction_rejects_total",
             "Evictions that fell short because the rest of the cache is locked.",
             lambda s: s.counters.locked_eviction_rejects),
    _counter("kvctl_admission_deferrals_total",
             "Admissions held back by the U_KV ceiling tau_high (seed 003).",
             lambda s: s.counters.admission_deferrals),
    _counter("kvctl_offload_bytes_total", "Bytes moved device -> host tier.",
             lambda s: s.counters.offload_bytes),
    _counter("kvctl_reload_bytes_total", "Bytes moved host tier -> device.",
             lambda s: s.counters.reload_bytes),
    _counter("kvctl_offloaded_tokens_total", "Tokens offloaded to the host tier.",
             lambda s: s.counters.offloaded_tokens),
    _counter("kvctl_reloaded_tokens_total", "Tokens reloaded from the host tier.",
             lambda s: s.counters.reloaded_tokens),
    _counter("kvctl_kv_events_total", "SGLang KV events recorded.", lambda s: s.counters.kv_events),
    # -- refcount reconciliation, seed 000 0x04B / 0x0CF: delta_ref = recorded - derived
    _gauge("kvctl_delta_ref_max", "Largest |lock_ref recorded - derived| over tree nodes.",
           lambda s: s.refs.delta_ref_max),
    _gauge("kvctl_delta_ref_nodes", "Tree nodes whose recorded lock_ref differs from leases.",
           _delta_ref_nodes),
    _gauge("kvctl_delta_protected_tokens",
           "Protected tokens recorded by the tree minus those derived from live leases.",
           lambda s: s.refs.delta_protected_tokens),
    _gauge("kvctl_ref_leases", "Live leases (locked paths) the reconciliation derived.",
           lambda s: s.refs.leases),
    _gauge("kvctl_ref_nodes_checked", "Tree nodes the reconciliation checked.",
           lambda s: s.refs.nodes_checked),
    # -- mapping lag, seed 000 0x06 / 0x0CF: L_map = max(0, f_required - f_ready)
    _gauge("kvctl_mapping_lag_tokens", "L_map summed over requests waiting for K/V to be resident.",
           lambda s: None if s.mapping is None else s.mapping.lag_tokens),
    _gauge("kvctl_mapping_wait_seconds", "Age of the oldest wait for K/V residency.",
           lambda s: None if s.mapping is None else s.mapping.max_wait_seconds),
    _gauge("kvctl_mapping_waiting_requests", "Requests waiting for K/V residency.",
           lambda s: None if s.mapping is None else s.mapping.waiting_requests),
    _counter("kvctl_mapping_stalls_total", "Requests that stalled on K/V residency.",
             lambda s: None if s.mapping is None else s.mapping.stalls_total),
    _counter("kvctl_mapping_stall_seconds_total", "Seconds requests spent stalled on residency.",
             lambda s: None if s.mapping is None else s.mapping.stall_seconds_total),
    # -- tree shape
    _gauge("kvctl_tree_nodes", "Nodes in the prefix tree.", lambda s: s.tree.nodes),
    _gauge("kvctl_tree_cached_tokens", "Tokens cached in the prefix tree.",
           lambda s: s.tree.cached_tokens),
    _gauge("kvctl_tree_leaves", "Leaves of the prefix tree.", lambda s: s.tree.leaves),
    _gauge("kvctl_tree_max_depth_tokens", "Longest cached prefix, in tokens.",
           lambda s: s.tree.max_depth_tokens),
    MetricSpec(name="kvctl_tree_medium_tokens", kind="gauge", labels=("medium",),
               read=_medium_tokens, help="Cached tokens by storage medium."),
    # -- alerts and requests
    MetricSpec(name="kvctl_alert_active", kind="gauge", labels=("alert", "severity"),
               read=_alerts,
               help="1 for each alert the engine holds active, by name and severity."),
    _gauge("kvctl_alerts_active", "Number of alerts the engine holds active.",
           lambda s: len(s.alerts)),
    MetricSpec(name="kvctl_requests", kind="gauge", labels=("state",), read=_request_states,
               help="Requests the engine tracks, by state."),
    MetricSpec(name="kvctl_namespace_requests", kind="gauge", labels=("namespace",),
               read=_namespace_requests, tenant_labels=("namespace",),
               help="Unfinished requests by tenant namespace (hashed unless allow-listed)."),
    # -- SGLang HiCache's host tier (telemetry/hicache_metrics.py)
    *(MetricSpec(name=name, kind=kind, help=help, labels=labels,
                 read=lambda s, _read=read: (Sample(*row) for row in _read(s)))
      for name, kind, help, labels, read in HICACHE_ROWS),
)

METRICS += WHATIF_METRICS
METRICS += FLEET_METRICS

METRICS_BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}

"""Building the engine-neutral Snapshot from remote observations (snapshot_build.py) and
summing a fleet (fleet_aggregate.py)."""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.funnel import STAGES
from engine_adapter.remote.fleet_aggregate import aggregate
from engine_adapter.remote.metrics_scrape import MetricsUnavailable, parse_metrics
from engine_adapter.remote.server_info import parse_server_info
from engine_adapter.remote.snapshot_build import build_snapshot, disconnected_snapshot
from engine_adapter.snapshot import Alert

pytestmark = pytest.mark.unit

METRICS = """
sglang:max_total_num_tokens{tp_rank="0"} 1024.0
sglang:kv_available_tokens{tp_rank="0"} 600.0
sglang:kv_evictable_tokens{tp_rank="0"} 300.0
sglang:kv_used_tokens{tp_rank="0"} 124.0
sglang:num_requests_total{is_streaming="false"} 10.0
sglang:prompt_tokens_total{is_streaming="false"} 2000.0
sglang:cached_tokens_total{cache_source="device"} 1500.0
sglang:generation_tokens_total{is_streaming="false"} 400.0
sglang:evicted_tokens_total{tp_rank="0"} 96.0
sglang:eviction_duration_seconds_count{tp_rank="0"} 3.0
sglang:num_retracted_requests_total{tp_rank="0"} 2.0
sglang:num_retracted_input_tokens_total{tp_rank="0"} 50.0
sglang:num_retracted_output_tokens_total{tp_rank="0"} 7.0
"""
INFO = parse_server_info(
    {
        "page_size": 16,
        "served_model_name": "m",
        "radix_eviction_policy": "lru",
        "version": "0.5.23",
        "max_total_num_tokens": 1024,
    },
    base_url="http://h:1",
)


def snap(text=METRICS, seq=1):
    return build_snapshot(
        seq=seq,
        attached_s=2.0,
        wall_time_s=100.0,
        info=INFO,
        metrics=parse_metrics(text),
        stream=None,
        shape=None,
    )


def test_ledger_comes_from_the_pool_gauges():
    """pool 1024 = free 600 + evictable 300 + used 124; protected/private not observable."""
    ledger = snap().ledger
    assert (
        ledger.pool_tokens,
        ledger.free_tokens,
        ledger.evictable_tokens,
        ledger.used_tokens,
        ledger.residual_tokens,
    ) == (1024, 600, 300, 124, 0)
    assert (ledger.protected_tokens, ledger.private_tokens) == (None, None)


def test_engine_info_says_remote():
    """engine, tree core and pool kind are "remote"."""
    info = snap().info
    assert (info.engine, info.tree_core, info.kv_pool, info.page_size, info.pool_tokens) == (
        "remote",
        "remote",
        "remote",
        16,
        1024,
    )


def test_funnel_observes_only_requests_and_hit_tokens():
    """requests 10 / 2000 prompt tokens; executed_hits 1500 tokens; every other stage None."""
    funnel = snap().funnel
    observed = {s.name: (s.requests, s.tokens) for s in funnel.stages}
    assert observed["requests"] == (10, 2000)
    assert observed["executed_hits"] == (None, 1500)
    assert all(observed[name] == (None, None) for name in STAGES[1:-1])
    assert funnel.hit_rate == 0.75 and funnel.is_monotone()


def test_cap_length_is_prompt_minus_one_per_request():
    """seed 000 0x07A: S_cap = S_prompt - 1, summed over 10 requests: 2000 - 10."""
    assert snap().funnel.lengths.cap == 1990


def test_refs_are_not_observable():
    """No lease or lock-ref numbers remotely; per_node False; ok is None."""
    refs = snap().refs
    assert (refs.leases, refs.nodes_checked, refs.per_node, refs.ok) == (None, None, False, None)


def test_counters_map_sglang_series():
    """Evictions from the eviction histogram count; retracted tokens input + output."""
    c = snap().counters
    assert (
        c.requests_finished,
        c.prompt_tokens,
        c.hit_tokens,
        c.recomputed_tokens,
        c.decode_tokens,
        c.evictions,
        c.evicted_tokens,
        c.retractions,
        c.retracted_tokens,
    ) == (10, 2000, 1500, 500, 400, 3, 96, 2, 57)


def test_missing_pool_gauges_raise():
    """A server without --enable-metrics gauges cannot give a ledger."""
    with pytest.raises(MetricsUnavailable, match="enable-metrics"):
        snap("sglang:num_requests_total 1.0\n")


def test_disconnected_keeps_last_numbers_marked_stale():
    """A disconnected read keeps the last ledger, says connected=False and carries the alert."""
    alert = Alert(name="remote_server_unreachable", severity="critical", evidence="refused")
    stale = disconnected_snapshot(
        seq=2, attached_s=3.0, wall_time_s=101.0, last=snap(), alert=alert
    )
    assert (stale.connected, stale.ledger.free_tokens, stale.alerts) == (False, 600, (alert,))


def test_never_connected_is_a_placeholder():
    """Without any good read every number is a labelled placeholder."""
    alert = Alert(name="remote_server_unreachable", severity="critical", evidence="refused")
    empty = disconnected_snapshot(seq=1, attached_s=0.0, wall_time_s=1.0, last=None, alert=alert)
    assert (empty.connected, empty.ledger.pool_tokens, empty.funnel.hit_rate) == (False, 0, None)
    assert "placeholder" in empty.notes[0]


def test_fleet_aggregate_sums_connected_workers():
    """Two connected workers sum their pools and counters; a down worker adds an alert."""
    a, b = snap(seq=1), snap(seq=2)
    down = dataclasses.replace(snap(seq=3), connected=False)
    fleet = aggregate([("a", a), ("b", b), ("c", down)], seq=9, wall_time_s=5.0)
    assert (fleet.ledger.pool_tokens, fleet.counters.prompt_tokens, fleet.hit_rate) == (
        2048,
        4000,
        0.75,
    )
    assert [x.name for x in fleet.alerts] == ["fleet_worker_down"]
    assert fleet.ledger.protected_tokens is None


def test_fleet_of_down_workers_is_disconnected():
    """No connected worker: the fleet snapshot is disconnected."""
    down = dataclasses.replace(snap(), connected=False)
    assert aggregate([("a", down)], seq=1, wall_time_s=1.0).connected is False

"""SGLang HiCache's host tier in kvctl's views: the host ledger's derived terms, the exporter's
kvctl_hicache_* samples and the inspect/monitor rows, from hand-built snapshots."""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.hicache_state import HiCacheIO, HostLedger
from kvctl.tui.host_tier import host_tier_derived, host_tier_rows
from telemetry.metrics_table import METRICS_BY_NAME
from tests.support.telemetry_fixtures import seed_snapshot

pytestmark = pytest.mark.unit

HOST = HostLedger(page_size=4, capacity_tokens=2052, free_tokens=1252, tree_tokens=792,
                  protected_tokens=16, write_policy="write_through")
IO = HiCacheIO(written_tokens=1600, loaded_tokens=784, written_bytes=819200, loaded_bytes=401408,
               pending_writes=1, pending_loads=0, hit_tokens_device=12, hit_tokens_host=784,
               hit_tokens_storage=None)


def _with_host(host=HOST, io=IO):
    snap = seed_snapshot()
    ledger = dataclasses.replace(snap.ledger, host=host, host_tokens=host.used_tokens,
                                 host_capacity_tokens=host.capacity_tokens)
    return dataclasses.replace(snap, ledger=ledger, hicache=io)


def _samples(name, snap):
    return {s.labels: s.value for s in METRICS_BY_NAME[name].read(snap)}


def test_host_ledger_derived_terms():
    """used = 2052 - 1252 = 800; evictable = 792 - 16 = 776; residual = 800 - 792 = 8."""
    assert (HOST.used_tokens, HOST.evictable_tokens, HOST.residual_tokens) == (800, 776, 8)
    assert HOST.usage == pytest.approx(800 / 2052)


def test_host_states_exported_by_ledger_state():
    """kvctl_hicache_host_tokens{state} carries free, evictable and protected."""
    assert _samples("kvctl_hicache_host_tokens", _with_host()) == {
        ("free",): 1252, ("evictable",): 776, ("protected",): 16}


def test_unobservable_host_terms_are_dropped_not_zero():
    """Between per-node reads evictable/protected/residual have no sample value (None)."""
    snap = _with_host(dataclasses.replace(HOST, tree_tokens=None, protected_tokens=None))
    assert _samples("kvctl_hicache_host_tokens", snap) == {
        ("free",): 1252, ("evictable",): None, ("protected",): None}
    assert _samples("kvctl_hicache_host_residual_tokens", snap) == {(): None}


def test_transfers_and_tier_hits_exported():
    """Written/loaded totals, pending by direction, hits by tier (storage None without L3)."""
    snap = _with_host()
    assert _samples("kvctl_hicache_loaded_tokens_total", snap) == {(): 784}
    assert _samples("kvctl_hicache_pending_transfers", snap) == {("write",): 1, ("load",): 0}
    assert _samples("kvctl_hicache_hit_tokens_total", snap) == {
        ("device",): 12, ("host",): 784, ("storage",): None}


def test_server_without_hicache_exports_no_hicache_samples():
    """No host tier: every kvctl_hicache_* family is empty."""
    snap = seed_snapshot()
    names = [n for n in METRICS_BY_NAME if n.startswith("kvctl_hicache_")]
    assert len(names) == 10
    assert all(list(METRICS_BY_NAME[n].read(snap)) == [] for n in names)


def test_inspect_rows_show_the_host_partition():
    """The rows inspect and monitor print: partition, residual verdict, transfers, tier hits."""
    assert host_tier_rows(_with_host()) == [
        ("host pool (HiCache L2)", "2,052 slots, write_through"),
        ("host free / evictable / protected", "1,252 / 776 / 16"),
        ("host residual (slots in no node)", "8 leak!"),
        ("host written / loaded tokens", "1,600 / 784 (pending writes 1, loads 0)"),
        ("hit tokens device / host / L3", "12 / 784 / —"),
    ]


def test_no_host_tier_no_rows_and_no_derived():
    """A snapshot without HiCache: no rows, `derived.host` is None."""
    snap = seed_snapshot()
    assert (host_tier_rows(snap), host_tier_derived(snap)) == ([], None)


def test_monitor_ledger_table_shows_the_host_tier():
    """`kvctl monitor`'s ledger table ends with the host tier's rows when HiCache is on."""
    from kvctl.tui.widgets.pool.ledger_table import ledger_text

    text = ledger_text(_with_host()).plain
    assert "host tier 800 / 2,052" in text
    assert "host free / evictable / protected 1,252 / 776 / 16" in text
    assert "host residual (slots in no node)  8 leak!" in text
    assert "host pool" not in ledger_text(seed_snapshot()).plain


def test_monitor_ledger_table_shows_an_unread_host_tier_as_a_dash():
    """host_tokens None (a host tier kvctl could not read) renders as a dash, never 0."""
    from kvctl.tui.widgets.pool.ledger_table import ledger_text

    snap = seed_snapshot()
    snap = dataclasses.replace(snap, ledger=dataclasses.replace(snap.ledger, host_tokens=None))
    assert "host tier —" in ledger_text(snap).plain

"""Merging the plugin's snapshot into a remote read (plugin_merge.py), the plugin's
discovery through /server_info (server_info.py), and the fleet sum of plugin-fed refs.

The remote read is built from SGLang-format metrics text (1024 = 600 free + 300 evictable
+ 124 used); the plugin's snapshot carries seed 000 0x0CF's numbers (tests/support/telemetry_fixtures.py:
12 = 3 free + 2 evictable + 5 protected + 2 private, funnel 12 >= 11 >= 9 ... >= 4).
"""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.funnel import STAGES
from engine_adapter.remote.fleet_aggregate import aggregate
from engine_adapter.remote.metrics_scrape import parse_metrics
from engine_adapter.remote.plugin_client import PluginRead
from engine_adapter.remote.plugin_merge import merge, plugin_down
from engine_adapter.remote.server_info import parse_server_info
from engine_adapter.remote.snapshot_build import NOT_OBSERVABLE, build_snapshot
from support.telemetry_fixtures import seed_funnel, seed_snapshot
from support.server_metrics_text import SMALL_SERVER_METRICS

pytestmark = pytest.mark.unit

METRICS = SMALL_SERVER_METRICS
BASE = "http://10.0.0.7:30000"
INFO = {"page_size": 16, "served_model_name": "m", "radix_eviction_policy": "lru",
        "version": "0.5.23", "max_total_num_tokens": 1024}
PLUGIN = "http://10.0.0.7:30100"


def remote():
    return build_snapshot(seq=4, attached_s=2.0, wall_time_s=100.0,
                          info=parse_server_info(INFO, base_url=BASE),
                          metrics=parse_metrics(METRICS), stream=None, shape=None)


def test_the_ledger_is_the_plugins_one_sample_and_sglangs_gauges_stay_beside_it():
    """Every ledger term is the plugin's (12 = 3 free + 2 evictable + 5 protected + 2
    private, residual 0), never SGLang's 600 free beside the plugin's 5 protected; SGLang's
    own gauges (1024 = 600 + 300 + 124) stay readable as `server_ledger`."""
    merged = merge(remote(), seed_snapshot(), plugin_url=PLUGIN)
    ledger = merged.ledger
    assert (ledger.pool_tokens, ledger.free_tokens, ledger.evictable_tokens,
            ledger.protected_tokens, ledger.private_tokens, ledger.used_tokens,
            ledger.residual_tokens) == (12, 3, 2, 5, 2, 7, 0)
    server = merged.server_ledger
    assert (server.pool_tokens, server.free_tokens, server.evictable_tokens,
            server.used_tokens, server.protected_tokens) == (1024, 600, 300, 124, None)
    assert (merged.seq, merged.info.engine, merged.info.page_size,
            merged.info.pool_tokens) == (4, "remote+plugin", 16, 12)


def test_refs_funnel_and_counters_come_from_the_plugin():
    """Refs (delta_ref 9 - 9 = 0), the whole seed funnel and the steps counter: the remote
    read observes none of them."""
    plugin = seed_snapshot()
    merged = merge(remote(), plugin, plugin_url=PLUGIN)
    assert merged.refs == plugin.refs and merged.refs.delta_ref_max == 0
    expected = [st.requests for st in seed_funnel().stages]
    assert [st.requests for st in merged.funnel.stages] == expected
    assert merged.counters.steps == plugin.counters.steps
    assert merged.counters.prompt_tokens == 2000  # the remote's own counter is kept


def test_not_observable_notes_are_dropped_and_the_plugin_is_named():
    """The remote's "not observable" notes go; a note names the plugin and its sample."""
    merged = merge(remote(), seed_snapshot(seq=7), plugin_url=PLUGIN)
    assert not set(NOT_OBSERVABLE) & set(merged.notes)
    assert any(n.startswith(f"plugin {PLUGIN}: sample #7") for n in merged.notes)


def test_a_plugin_that_sees_no_more_stages_keeps_the_remote_funnel():
    """A plugin funnel with only the first stage observable does not replace the remote's."""
    plugin = seed_snapshot()
    hidden = tuple(dataclasses.replace(st, requests=None, tokens=None) if st.name != "requests"
                   else st for st in plugin.funnel.stages)
    plugin = dataclasses.replace(plugin, funnel=dataclasses.replace(plugin.funnel, stages=hidden))
    merged = merge(remote(), plugin, plugin_url=PLUGIN)
    assert merged.funnel == remote().funnel


def test_plugin_down_adds_an_alert_and_no_numbers():
    """An unavailable plugin: the remote read unchanged but for the alert and a note."""
    read = PluginRead(url=PLUGIN, state="disabled", snapshot=None, error="boom")
    down = plugin_down(remote(), read)
    assert (down.ledger, down.refs, down.funnel) == (remote().ledger, remote().refs,
                                                     remote().funnel)
    (alert,) = down.alerts
    assert (alert.name, alert.severity) == ("plugin_unavailable", "warning")
    assert alert.evidence == f"{PLUGIN}: disabled: boom; plugin fields are not observable"


@pytest.mark.parametrize(("announced", "expected"), [
    ("http://127.0.0.1:30100", "http://10.0.0.7:30100"),  # loopback: the host we reached
    ("http://0.0.0.0:30100", "http://10.0.0.7:30100"),  # wildcard bind
    ("http://10.0.0.9:30100", "http://10.0.0.9:30100"),  # a real address is kept
    ("http://127.0.0.1:99999", None),  # an unusable port: not discovered
    ("ftp://10.0.0.9:21", None),
])  # fmt: skip
def test_plugin_discovery_from_server_info(announced, expected):
    """`kvctl_plugin.url` in /server_info becomes ServerInfo.plugin_url."""
    info = parse_server_info({**INFO, "kvctl_plugin": {"url": announced, "schema_version": 1}},
                             base_url=BASE)
    assert info.plugin_url == expected


def test_no_announcement_no_plugin():
    assert parse_server_info(INFO, base_url=BASE).plugin_url is None


def test_fleet_sums_plugin_refs_and_keeps_none_without():
    """Two plugin-fed workers with the seed's 2 leases and 9 protected tokens each: 4 leases,
    18 recorded = 18 derived; a worker without the plugin makes the sums None."""
    with_plugin = merge(remote(), seed_snapshot(), plugin_url=PLUGIN)
    both = aggregate([("a", with_plugin), ("b", with_plugin)], seq=1, wall_time_s=1.0)
    assert (both.refs.leases, both.refs.recorded_protected_tokens,
            both.refs.derived_protected_tokens, both.refs.delta_ref_max) == (4, 18, 18, 0)
    mixed = aggregate([("a", with_plugin), ("b", remote())], seq=1, wall_time_s=1.0)
    assert mixed.refs.leases is None and mixed.refs.delta_ref_max is None
    assert len(STAGES) == len(both.funnel.stages)

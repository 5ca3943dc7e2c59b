"""Data parallelism: one plugin endpoint per DP rank (plugin_ranks.py), read together and
summed, each rank's ledger kept. Ranks are the seed 000 0x0CF snapshot (12 = 3 free +
2 evictable + 5 protected + 2 private) and a second, different sample of the same shape."""

from __future__ import annotations

import dataclasses

import pytest

from engine_adapter.remote.plugin_ranks import PluginRanks, rank_urls, sum_ranks
from support.telemetry_fixtures import seed_snapshot

pytestmark = pytest.mark.unit

RANK1_LEDGER = dataclasses.replace(seed_snapshot().ledger, free_tokens=1, evictable_tokens=6,
                                   protected_tokens=4, private_tokens=1, used_tokens=5)


def _ranks():
    return [("http://h:30100", seed_snapshot(seq=3)),
            ("http://h:30101", seed_snapshot(seq=9, ledger=RANK1_LEDGER))]


def test_rank_urls_are_the_base_port_plus_the_rank():
    """port_base + r, host kept (IPv6 bracketed)."""
    assert rank_urls("http://10.0.0.7:30100", 3) == [
        "http://10.0.0.7:30100", "http://10.0.0.7:30101", "http://10.0.0.7:30102"]
    assert rank_urls("http://[::1]:30100", 2)[1] == "http://[::1]:30101"


def test_sum_keeps_each_ranks_ledger_and_balances():
    """Rank ledgers (3, 2, 5, 2) and (1, 6, 4, 1) are kept; the shown ledger is their sum
    (pool 24 = 4 + 8 + 9 + 3), residual 0; refs and requests from both ranks."""
    total = sum_ranks(_ranks())
    assert [(x.free_tokens, x.evictable_tokens, x.protected_tokens, x.private_tokens)
            for x in total.rank_ledgers] == [(3, 2, 5, 2), (1, 6, 4, 1)]
    ledger = total.ledger
    assert (ledger.pool_tokens, ledger.free_tokens, ledger.evictable_tokens,
            ledger.protected_tokens, ledger.private_tokens, ledger.residual_tokens) == (
        24, 4, 8, 9, 3, 0)
    assert (total.info.pool_tokens, total.refs.leases, len(total.requests)) == (24, 4, 4)


def test_a_rank_that_is_not_ok_makes_the_whole_read_fail_naming_the_rank():
    """Two real endpoints over HTTP, rank 1 still starting: the read is "starting", no
    snapshot (no half-server sum), the error names DP rank 1 and its URL."""
    from engine_adapter.remote.plugin_client import PluginClient
    from engine_adapter.snapshot_codec import encode_snapshot
    from plugin_endpoint import PluginEndpoint

    endpoints = [PluginEndpoint(encode_snapshot(seed_snapshot())) for _ in range(2)]
    endpoints[1].status = "starting"
    try:
        ranks = PluginRanks(endpoints[0].url, dp_size=2)
        ranks.clients = [PluginClient(e.url) for e in endpoints]  # ports need not be adjacent
        read = ranks.read()
        assert (read.state, read.snapshot) == ("starting", None)
        assert read.error == (f"DP rank 1 of 2 ({endpoints[1].url}): "
                              "the plugin has not sampled yet")
        endpoints[1].status = "ok"
        ranks.clients = [PluginClient(e.url) for e in endpoints]
        assert ranks.read().snapshot.ledger.pool_tokens == 24
    finally:
        for endpoint in endpoints:
            endpoint.close()

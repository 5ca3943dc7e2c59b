"""SGLang's own HiCache in the real CPU server, observed by kvctl's plugin.

The server runs `--enable-hierarchical-cache --hicache-ratio 2 --hicache-io-backend direct
--hicache-mem-layout layer_first` through the CPU test platform's stack strategy
(kvctl/sandbox/hicache_cpu.py; docs/hicache.md): SGLang's tree,
controller, host pool and acks, with unpinned host memory and torch index copies. Traffic:
eight 200-token prompts (1,600 tokens) through the 1,024-token device pool, twice. The first
round overflows L1, so the second round finds most prefixes evicted from device and loads
them back from the 2,052-slot host pool.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import pytest

from e2e.kvctl_cli import kvctl_json
from e2e.prometheus_proc import Prometheus, wait_for
from e2e.plugin_server import started_plugin_server
from e2e.sglang_server import ROOT
from support.dashboard_queries import HICACHE_METRIC, panel_queries
from support.telemetry_fixtures import ExporterProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HICACHE_ARGS = ("--enable-hierarchical-cache", "--hicache-ratio", "2",
                "--hicache-io-backend", "direct", "--hicache-mem-layout", "layer_first")


@pytest.fixture(scope="module")
def hicache_server(tmp_path_factory):
    with started_plugin_server(tmp_path_factory.mktemp("sglang-hicache"),
                               extra_args=HICACHE_ARGS,
                               env={"KVCTL_PLUGIN_LEDGER_S": "0.2",
                                    "KVCTL_PLUGIN_TREE_S": "0.2"}) as server:
        yield server


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(1, 500) for _ in range(200)] for _ in range(8)]


def _inspect_settled(server, timeout_s: float = 30.0) -> dict:
    """`kvctl inspect --json` once the plugin's sample has no HiCache transfer in flight."""
    deadline = time.monotonic() + timeout_s
    while True:
        doc = kvctl_json("inspect", "--url", server.url, "--plugin-url", server.plugin_url)
        io = doc["snapshot"]["hicache"]
        if io is not None and io["pending_writes"] == io["pending_loads"] == 0 and \
                doc["snapshot"]["ledger"]["host"]["tree_tokens"] is not None:
            return doc
        assert time.monotonic() < deadline, f"HiCache transfers still pending: {io}"
        time.sleep(0.5)


def test_host_tier_overflow_load_back_matches_sglang_per_request_details(hicache_server):
    """Traffic overflowing L1: the host ledger balances (residual 0), and the host hits and
    load-back tokens kvctl reports equal SGLang's own per-request cached_tokens_details
    summed; `kvctl inspect --json` shows all of it."""
    assert hicache_server.flush_cache(wait_s=30)
    prompts = _prompts()
    details = [hicache_server.generate(p, max_new_tokens=2)["meta_info"].get(
        "cached_tokens_details") or {} for _ in range(2) for p in prompts]
    host_hits = sum(d.get("host", 0) for d in details)
    device_hits = sum(d.get("device", 0) for d in details)
    assert host_hits > 0  # L1 overflowed: the second round hit the host tier

    doc = _inspect_settled(hicache_server)
    snap, derived = doc["snapshot"], doc["derived"]["host"]
    host, io = snap["ledger"]["host"], snap["hicache"]
    assert host["capacity_tokens"] == 2052 and host["write_policy"] == "write_through"
    assert derived["residual_tokens"] == 0
    assert host["free_tokens"] + host["tree_tokens"] == host["capacity_tokens"]
    assert (io["hit_tokens_host"], io["hit_tokens_device"]) == (host_hits, device_hits)
    assert io["loaded_tokens"] == host_hits
    assert io["written_tokens"] == 1600  # 8 prompts x 50 full pages, each backed up once
    assert snap["ledger"]["host_tokens"] == derived["used_tokens"] == host["tree_tokens"]


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="prometheus not installed (apt-get install prometheus)")
def test_dashboard_tier_panels_return_data_from_the_hicache_server(hicache_server, tmp_path):
    """`kvctl exporter --url --plugin-url` on the HiCache server, scraped by a real Prometheus:
    every query of the overview's HiCache panels returns a series, the host residual is 0
    and the host-tier hits Prometheus holds equal the plugin's."""
    overview = Path(ROOT) / "dashboards" / "kvctl-overview.json"
    with ExporterProcess("--url", hicache_server.url, "--plugin-url", hicache_server.plugin_url,
                         "--interval", "0.5") as exporter:
        with Prometheus(tmp_path, [exporter.instance]) as prom:
            wait_for(lambda: prom.value("kvctl_hicache_host_capacity_tokens") == 2052, 60,
                     "the host pool's capacity scraped")
            for ids in _prompts():  # a host tier that moves while Prometheus watches
                hicache_server.generate(ids, max_new_tokens=2)
            hits = _inspect_settled(hicache_server)["snapshot"]["hicache"]["hit_tokens_host"]
            wait_for(lambda: prom.value('kvctl_hicache_hit_tokens_total{tier="host"}') == hits,
                     60, f"{hits} host hit tokens scraped")
            wait_for(lambda: prom.value("kvctl_hicache_host_residual_tokens") == 0, 60,
                     "host residual 0")
            queries = [(name, expr) for name, expr in panel_queries(overview, exporter.instance)
                       if HICACHE_METRIC in expr]
            assert len(queries) == 8
            assert [name for name, expr in queries if not prom.query(expr)] == []
    assert exporter.returncode == 0, exporter.stderr

"""SGLang's own HiCache in the real CPU server, observed by kvctl's plugin.

The server runs `--enable-hierarchical-cache --hicache-ratio 2 --hicache-io-backend direct
--hicache-mem-layout layer_first` through the CPU test platform's stack strategy
(tests/support/sglang_cpu_platform/hicache_cpu.py; docs/hicache.md): SGLang's tree,
controller, host pool and acks, with unpinned host memory and torch index copies. Traffic:
eight 200-token prompts (1,600 tokens) through the 1,024-token device pool, twice. The first
round overflows L1, so the second round finds most prefixes evicted from device and loads
them back from the 2,052-slot host pool.
"""

from __future__ import annotations

import random
import time

import pytest

from e2e.kvctl_cli import kvctl_json
from e2e.sglang_server import SGLangServer, free_port, skip_reason

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HICACHE_ARGS = ("--enable-hierarchical-cache", "--hicache-ratio", "2",
                "--hicache-io-backend", "direct", "--hicache-mem-layout", "layer_first")


@pytest.fixture(scope="module")
def hicache_server(tmp_path_factory):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    port = free_port()
    server = SGLangServer(tmp_path_factory.mktemp("sglang-hicache"), extra_args=HICACHE_ARGS,
                          extra_env={"KVCTL_SGLANG_PLUGIN": "1", "KVCTL_PLUGIN_PORT": str(port),
                                     "KVCTL_PLUGIN_LEDGER_S": "0.2", "KVCTL_PLUGIN_TREE_S": "0.2"})
    server.plugin_url = f"http://127.0.0.1:{port}"
    try:
        server.start()
        yield server
    finally:
        server.stop()


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
    rng = random.Random(0)
    prompts = [[rng.randrange(1, 500) for _ in range(200)] for _ in range(8)]
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

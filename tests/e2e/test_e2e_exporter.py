"""`kvctl exporter --url` re-exports a real `sglang.launch_server` to a real Prometheus.

Expected values: the pool is the server's `--max-total-tokens`; three prompts sharing a
4-page prefix at page size 4 leave 4 + 3 x 2 pages (40 tokens) in the tree, and SGLang
reports 16 cached tokens for each of the last two (see test_e2e_inspect's docstring).
"""

from __future__ import annotations

import shutil

import pytest

from e2e.kvctl_cli import shared_prefix_prompts
from e2e.prometheus_proc import Prometheus, wait_for
from e2e.sglang_server import PAGE, POOL_TOKENS
from support.telemetry_fixtures import ExporterProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus not installed (apt-get install prometheus)"),
]

PREFIX, SUFFIX, COUNT = 4 * PAGE, 2 * PAGE, 3


def test_prometheus_scrapes_the_live_server_through_the_exporter(server, tmp_path):
    """Prometheus sees the server's pool, the mirror's 40 cached tokens and exactly the 32
    hit tokens SGLang reported for the requests sent while it watched."""
    with ExporterProcess("--url", server.url, "--interval", "0.5") as exporter:
        with Prometheus(tmp_path, [exporter.instance]) as prom:
            wait_for(lambda: prom.value("kvctl_connected") == 1.0, 60, "kvctl_connected 1")
            assert prom.value("kvctl_up") == 1.0
            assert prom.value("kvctl_pool_capacity_tokens") == POOL_TOKENS
            wait_for(lambda: prom.value("kvctl_tree_cached_tokens") == 0.0, 60,
                     "the KV-event mirror attached, empty")
            hits_before = prom.value("kvctl_hit_tokens_total")
            assert hits_before is not None

            replies = [server.generate(ids) for ids in shared_prefix_prompts(PREFIX, SUFFIX, COUNT)]
            reported = sum(r["meta_info"]["cached_tokens"] for r in replies)
            assert reported == (COUNT - 1) * PREFIX

            cached = PREFIX + COUNT * SUFFIX
            wait_for(lambda: prom.value("kvctl_tree_cached_tokens") == cached, 60,
                     f"kvctl_tree_cached_tokens {cached}")
            wait_for(lambda: prom.value("kvctl_hit_tokens_total") == hits_before + reported,
                     60, f"kvctl_hit_tokens_total +{reported}")
    assert exporter.returncode == 0, exporter.stderr

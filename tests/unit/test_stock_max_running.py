"""The max running requests a stock SGLang server would run (SGLang 0.5.23,
mem_cache/kv_cache_configurator.py resolve_max_num_reqs), and the replay header that names
it when kvctl's own default (256) differs."""

from __future__ import annotations

import pytest

from engine_adapter.embedded.config import sglang_default_max_running
from kvctl.cli.sched_options import sched_header

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("pool", "context", "expected"), [
    (65_536, 32_768, 2_048),     # 1,024 estimated, raised to the 2,048 floor
    (498_480, 121_232, 2_105),   # 2,105.3 estimated: inside [2,048, 4,096]
    (1_000_000, 8_192, 4_096),   # 62,500 estimated, capped at 4,096
    (2_048, 512, 1_024),         # half the pool is less than the floor
])
def test_stock_max_running_follows_sglang_resolve_max_num_reqs(pool, context, expected):
    """pool / context * 512 clamped to [2048, 4096], then at most pool // 2."""
    assert sglang_default_max_running(pool, context) == expected


def _settings(**over):
    return {"schedule_policy": "fcfs", "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
            "max_running_requests": 256, "kvctl_mechanisms": [], **over}


def test_header_names_the_stock_max_running_when_kvctl_default_differs():
    """Neither the user nor the scenario set max running: the header says 256 is kvctl's
    default and what a stock server would run, with the flag that gives it."""
    line = sched_header(_settings(stock_max_running_requests=2_105))
    assert line.endswith("max running 256  (kvctl's default max running; a stock server "
                         "runs 2,105: --max-running 2105)")


def test_header_says_stock_when_max_running_was_given():
    """Set explicitly (stock None) and no kvctl-only mechanism: a stock server's settings."""
    assert sched_header(_settings(stock_max_running_requests=None)).endswith(
        "max running 256  (as a stock SGLang server)")

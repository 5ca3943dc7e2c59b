"""The stock max running requests kvctl states (`stock_max_running_requests` in the replay's
header and --json) is what a real SGLang server resolves when --max-running-requests is not
given: one server on this CPU started without the flag, its `/server_info` read.

Pool 20,000 tokens and context 4,096 put SGLang's estimate (pool / context x 512 = 2,500)
inside its [2048, 4096] clamp and under half the pool, so the formula's middle is what is
compared, not a clamp.
"""

from __future__ import annotations

import pytest

from e2e.sglang_server import SGLangServer, skip_reason
from engine_adapter.embedded.config import sglang_default_max_running
from kvctl.twin.settings_map import server_settings_to_replay_options
from kvctl.sandbox.config import SandboxConfig

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POOL, CONTEXT = 20_000, 4_096


def test_a_server_without_the_flag_runs_the_stock_figure_kvctl_states(tmp_path):
    """A server started without --max-running-requests reports (top level None, the
    scheduler's `effective_max_running_requests_per_dp`) the figure
    `sglang_default_max_running(pool, context)` computes, and `--against` takes it."""
    if reason := skip_reason():
        pytest.skip(reason)
    server = SGLangServer(tmp_path, config=SandboxConfig(
        page_size=4, pool_tokens=POOL, context_length=CONTEXT, max_running=None, plugin=False))
    assert "--max-running-requests" not in server.command()
    server.start()
    try:
        info = server.server_info()
    finally:
        server.stop()
    expected = sglang_default_max_running(POOL, CONTEXT)
    assert expected == 2_500
    assert info["max_running_requests"] is None  # the flag's echo
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == expected
    assert server_settings_to_replay_options(info)["max_running_requests"] == expected

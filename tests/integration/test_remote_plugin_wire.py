"""kvctl's PluginClient against the plugin's own HTTP server (engine_adapter/plugin/server.py),
so the two ends of the wire cannot drift apart: the real `PluginServer` on loopback over a
runtime stand-in holding the seed 000 0x0CF snapshot (tests/support/telemetry_fixtures.py). The stand-in
offers only what the server reads (`settings.token`, `latest`, `disabled`,
`disabled_reason`, `health()`); the runtime proper needs a real SGLang scheduler.
Skipped where the plugin package is absent.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine_adapter.remote.plugin_client import PluginClient
from support.telemetry_fixtures import seed_snapshot

pytestmark = pytest.mark.integration
server_module = pytest.importorskip("engine_adapter.plugin.server")


class _Runtime:
    def __init__(self, token: str | None) -> None:
        self.settings = SimpleNamespace(token=token)
        self.latest = None
        self.disabled_reason: str | None = None

    @property
    def disabled(self) -> bool:
        return self.disabled_reason is not None

    def health(self) -> dict:
        status = "disabled" if self.disabled else ("ok" if self.latest else "starting")
        return {"status": status, "failures": 0, "disabled_reason": self.disabled_reason,
                "dp_rank": 0, "steps": 12}


@pytest.fixture
def served():
    runtime = _Runtime(token="tok")
    server = server_module.PluginServer(runtime, "127.0.0.1", 0)
    yield runtime, server
    server.close()


def test_client_reads_the_plugin_servers_states(served):
    """starting (no sample) -> ok (the seed snapshot, exactly) -> disabled (no snapshot);
    and a wrong token is unauthorized."""
    runtime, server = served
    client = PluginClient(server.url, token="tok")
    assert client.read(now=0.0).state == "starting"
    runtime.latest = seed_snapshot(seq=5)
    read = client.read(now=1.0)
    assert (read.state, read.snapshot, read.health["steps"]) == ("ok", seed_snapshot(seq=5), 12)
    runtime.disabled_reason = "disabled after 5 failures; last: ValueError: x"
    read = client.read(now=2.0)
    assert (read.state, read.snapshot) == ("disabled", None)
    assert PluginClient(server.url, token="nope").read(now=0.0).state == "unauthorized"

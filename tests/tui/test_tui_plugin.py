"""The monitor on a remote server with the kvctl plugin: the "not observable (remote)" marks
disappear for what the plugin supplies (issue 11 item 4), and come back, with the plugin's
state as an alert, when it becomes unavailable.

Real components: a RemoteEngine over HTTP and ZMQ to SGLang's loopback stand-in (its own
process), and a loopback HTTP endpoint with the plugin's wire contract serving a REAL
embedded-engine snapshot (tests/plugin_endpoint.py says why it stands in for the plugin).
"""

from __future__ import annotations

import pytest
from plugin_endpoint import PluginEndpoint, live_request_snapshot
from tui_helpers import SIZE, widget_text

from kvctl.tui.app import make_app
from kvctl.tui.screens.monitor import MonitorScreen
from kvctl.tui.widgets.integrity.ref_check import RefCheck
from kvctl.tui.widgets.pool.ledger_table import LedgerTable
from kvctl.tui.widgets.requests.state_counts import StateCounts
from kvctl.tui.widgets.status.status_bar import StatusBar

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


@pytest.fixture(scope="module")
def endpoint(sglang_ready):
    from engine_adapter.snapshot_codec import encode_snapshot

    ep = PluginEndpoint(encode_snapshot(live_request_snapshot()))
    yield ep
    ep.close()


async def until(pilot, predicate, what: str):
    for _ in range(300):
        if predicate():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out waiting for {what}")


def text_of(app, widget) -> str:
    return widget_text(app.screen.query_one(widget))


async def test_plugin_fields_replace_not_observable(loopback_demo_url, endpoint):
    """With the plugin: the protected/private split (192 protected), delta_ref and the
    request states are shown; none says "not observable (remote)". Disabled: they say it
    again and the plugin_unavailable alert is on the snapshot."""
    from engine_adapter.remote.remote_engine import RemoteEngine

    def build():
        return RemoteEngine(loopback_demo_url, events=False, plugin_url=endpoint.url)

    app = make_app(build, refresh_s=0.1, label="plugin")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen)
                    and app.screen.snapshot is not None, "a snapshot")
        await pilot.pause()
        assert app.screen.snapshot.info.engine == "remote+plugin"
        for widget in (StateCounts, RefCheck, LedgerTable):
            assert "not observable" not in text_of(app, widget), widget.__name__
        assert "192" in text_of(app, LedgerTable)
        assert "running 1" in " ".join(text_of(app, StateCounts).split())
        assert "attached" in text_of(app, StatusBar)
        endpoint.status = "disabled"
        await until(pilot, lambda: app.screen.snapshot.info.engine == "remote", "plugin down")
        await pilot.pause()
        for widget in (StateCounts, RefCheck, LedgerTable):
            assert "not observable (remote)" in text_of(app, widget), widget.__name__
        assert "plugin_unavailable" in {a.name for a in app.screen.snapshot.alerts}

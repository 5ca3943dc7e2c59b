"""The monitor on a source that is down (issue 16 section 1): a disconnected banner, values
greyed and marked stale rather than zeroed, and placeholders never drawn.

The sources are real: a RemoteEngine attached over HTTP to a port where nothing listens,
and to a relay (a real loopback HTTP server, tests/remote_relay.py) in front of SGLang's
loopback stand-in, stopped mid-run and started again.
"""

from __future__ import annotations

import pytest
from remote_relay import Relay, dead_url
from tui_helpers import SIZE, widget_text

from kvctl.tui.app import make_app
from kvctl.tui.screens.monitor import MonitorScreen
from kvctl.tui.widgets.common.snapshot_widgets import WAITING
from kvctl.tui.widgets.pool.ledger_table import LedgerTable
from kvctl.tui.widgets.status.disconnected_banner import DisconnectedBanner
from kvctl.tui.widgets.status.status_bar import StatusBar

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def remote_app(url):
    from engine_adapter.remote.remote_engine import RemoteEngine

    return make_app(lambda: RemoteEngine(url, events=False), refresh_s=0.1, label=url)


async def until(pilot, predicate, what: str):
    for _ in range(300):
        if predicate():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out waiting for {what}")


def banner(app) -> DisconnectedBanner:
    return app.screen.query_one(DisconnectedBanner)


async def test_dead_url_shows_banner_and_no_numbers():
    """Never connected: the banner says why, the status bar says disconnected, and the
    panels keep waiting: the placeholder snapshot's zeros are never drawn."""
    url = dead_url()
    app = remote_app(url)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: banner(app).has_class("-shown"), "the banner")
        await pilot.pause()
        text = widget_text(banner(app))
        assert text.startswith("✖ DISCONNECTED · no reading yet: nothing is shown until")
        assert f"· {url}/server_info: [Errno 111] Connection" in text
        assert "disconnected" in widget_text(app.screen.query_one(StatusBar))
        assert widget_text(app.screen.query_one(LedgerTable)).strip() == WAITING
        assert app.screen.snapshot is None and not app.screen.has_class("-stale")


async def test_server_dies_mid_run_values_stay_and_turn_stale(loopback_demo_url):
    """Connected, then the server stops: the banner says STALE with the last good read, the
    dashboard is greyed (-stale) and keeps the last numbers (not zeros); when the server
    answers again the banner and the greying go away."""
    relay = Relay(loopback_demo_url)
    app = remote_app(relay.url)
    try:
        async with app.run_test(size=SIZE) as pilot:
            screen = app.screen
            await until(pilot, lambda: isinstance(app.screen, MonitorScreen)
                        and app.screen.snapshot is not None, "a connected snapshot")
            good = screen.snapshot
            assert good.connected and not banner(app).has_class("-shown")
            await pilot.pause()
            good_ledger = widget_text(screen.query_one(LedgerTable))
            assert f"{good.ledger.free_tokens:,}" in good_ledger
            relay.stop()
            await until(pilot, lambda: banner(app).has_class("-shown"), "the banner")
            await pilot.pause()
            stale = screen.snapshot
            assert not stale.connected and stale.ledger == good.ledger
            text = widget_text(banner(app))
            assert text.startswith(
                f"✖ DISCONNECTED · the numbers below are STALE (last good read "
                f"#{app._last_good_seq:,}), greyed · {relay.url}/")
            assert app._last_good_seq >= good.seq
            assert screen.has_class("-stale")
            assert widget_text(screen.query_one(LedgerTable)) == good_ledger
            relay.start()
            await until(pilot, lambda: not banner(app).has_class("-shown"), "reconnection")
            assert screen.snapshot.connected and not screen.has_class("-stale")
    finally:
        relay.close()


async def test_status_waits_for_the_first_read_before_saying_live(loopback_demo_url):
    """The source is built but its first read has not come back: the status bar says it is
    waiting for the first read, never "live"; once the read arrives it says live. (The
    source is a real RemoteEngine on SGLang's loopback stand-in whose reads are held back
    by a gate until the test opens it.)"""
    import threading

    from engine_adapter.remote.remote_engine import RemoteEngine

    gate = threading.Event()

    class Gated:
        def __init__(self):
            self.inner = RemoteEngine(loopback_demo_url, events=False)

        def snapshot(self):
            gate.wait(30)
            return self.inner.snapshot()

        def close(self):
            self.inner.close()

    app = make_app(lambda: Gated(), refresh_s=0.1, label="gated")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen)
                    and app.source is not None, "the source")
        await pilot.pause(0.3)
        status = widget_text(app.screen.query_one(StatusBar))
        assert "waiting for the first read" in status and "live" not in status, app.failure
        gate.set()
        await until(pilot, lambda: app.screen.snapshot is not None, "the first read")
        await pilot.pause()
        assert "● live, read-only" in widget_text(app.screen.query_one(StatusBar))

"""The monitor on a remote, read-only source: a RemoteEngine attached over real HTTP and
ZMQ to SGLang's own cache, metrics collectors and KV-event publisher, served by
`python -m support.loopback_demo` (tests/support) in a separate process.

Keys that would change the server (p, s, f) are refused with a notice, and every panel
whose data SGLang does not publish says "not observable (remote)".
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tui_helpers import SIZE, widget_text

from kvctl.tui.app import make_app
from kvctl.tui.screens.monitor import MonitorScreen
from kvctl.tui.widgets.integrity.mapping_lag import MappingLagLine
from kvctl.tui.widgets.integrity.ref_check import RefCheck
from kvctl.tui.widgets.pool.ledger_table import LedgerTable
from kvctl.tui.widgets.requests.state_counts import StateCounts
from kvctl.tui.widgets.status.status_bar import StatusBar

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory):
    ready = tmp_path_factory.mktemp("loopback") / "url"
    proc = subprocess.Popen(
        [sys.executable, "-m", "support.loopback_demo", "--ready-file", str(ready)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"},
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while not ready.exists() or not ready.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"loopback demo did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)
    yield ready.read_text().strip()
    proc.terminate()
    proc.wait(timeout=30)


async def attached(pilot, app):
    """Wait (bounded) until the first connected remote snapshot is on screen."""
    for _ in range(200):
        snapshot = app.screen.snapshot if isinstance(app.screen, MonitorScreen) else None
        if snapshot is not None and snapshot.connected:
            return snapshot
        await pilot.pause(0.05)
    pytest.fail("no connected remote snapshot")


def text_of(app, selector) -> str:
    return widget_text(app.screen.query_one(selector))


def remote_app(url):
    from engine_adapter.remote.remote_engine import RemoteEngine

    return make_app(lambda: RemoteEngine(url), refresh_s=0.1, label=f"{url} (remote, read-only)")


async def test_remote_keys_are_refused(demo_url):
    """p, s and f on a read-only source notify and change nothing (no flush dialog)."""
    app = remote_app(demo_url)
    async with app.run_test(size=SIZE) as pilot:
        await attached(pilot, app)
        assert "read-only" in text_of(app, StatusBar)
        for key, verb in (("p", "pause"), ("s", "step"), ("f", "flush")):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, MonitorScreen)
            latest = list(app._notifications)[-1]
            assert (
                latest.message == f"cannot {verb}: this source is read-only (remote); embedded only"
            )
            assert latest.severity == "warning"


async def test_remote_panels_say_not_observable(demo_url):
    """Requests, delta_ref, mapping lag and the protected/private split are not published
    by SGLang; the pool's free/evictable/used come from its /metrics."""
    app = remote_app(demo_url)
    async with app.run_test(size=SIZE) as pilot:
        snapshot = await attached(pilot, app)
        await pilot.pause()
        for widget in (StateCounts, RefCheck, MappingLagLine, LedgerTable):
            assert "not observable (remote)" in text_of(app, widget), widget.__name__
        assert snapshot.ledger.pool_tokens == 512  # loopback_demo's default --pool-tokens
        assert f"{snapshot.ledger.free_tokens:,}" in text_of(app, LedgerTable)
        tree_text = text_of(app, "#tree-remote")
        assert "radix tree browser: not observable (remote)" in tree_text

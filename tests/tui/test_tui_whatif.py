"""The monitor's what-if line (issue 28): the sampled shadow's "2x pool: a% -> b%" estimate
under the hit rate, worded as `kvctl inspect` words it, and "not observable" (never 0) on
a source without a what-if shadow.

Sources are real: the embedded engine running a shipped scenario (it runs the shadow), and
a RemoteEngine attached over HTTP to SGLang's loopback stand-in (no kvctl plugin, so no
shadow).
"""

from __future__ import annotations

import pytest
from textual.widgets import Static
from tui_helpers import SIZE, widget_text

from kvctl.tui.app import make_app
from kvctl.tui.screens.monitor import MonitorScreen

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def whatif_text(app) -> str:
    return widget_text(app.screen.query_one("#reuse-whatif", Static)).strip()


async def test_whatif_line_shows_the_engines_estimate(make_run):
    """lifecycle-check after 200 steps (seed 7): the line shows the embedded engine's own
    shadow curve at 1x and 2x, with the measured 1x hit rate beside it, in the snapshot's
    figures (the estimates themselves: benchmarks/bench_whatif.py)."""
    run = make_run("lifecycle-check", steps=200)
    app = make_app(run, refresh_s=60.0, label="lifecycle-check")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        curve = app.screen.snapshot.whatif
        assert curve is not None and curve.requests > 0
        one, two = curve.at(1.0).hit_rate, curve.at(2.0).hit_rate
        assert whatif_text(app) == (
            f"what-if 2x pool: {one:.1%} -> {two:.1%} (est., LRU; 1x measured "
            f"{curve.measured_hit_rate:.1%})"
        )


async def test_whatif_line_is_not_observable_without_a_shadow(loopback_demo_url):
    """A remote server without the kvctl plugin has no what-if shadow (Snapshot.whatif is
    None): the line says not observable, and no percentage is drawn."""
    from engine_adapter.remote.remote_engine import RemoteEngine

    app = make_app(lambda: RemoteEngine(loopback_demo_url, events=False), refresh_s=0.1,
                   label=loopback_demo_url)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(300):
            if isinstance(app.screen, MonitorScreen) and app.screen.snapshot is not None:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        assert app.screen.snapshot.whatif is None
        assert whatif_text(app) == "what-if not observable (needs the kvctl plugin)"

"""Pilot tests: the monitor at 80x24 and at 160x50, and a tree that shows what the
requests table points at.

The source is the real embedded engine (SGLang's radix cache) running the shipped
lifecycle-check scenario, paused after STEPS steps (tui_helpers.paused_run).
"""

from __future__ import annotations

import contextlib

import pytest
from tui_helpers import widget_text

from kvctl.tui.app import make_app
from kvctl.tui.widgets.requests.requests_table import RequestsTable
from kvctl.tui.widgets.status.status_bar import StatusBar
from kvctl.tui.widgets.tree.radix_tree import RadixTreeBrowser

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

STEPS = 200
ENGINE = "embedded · rust core · lru · page 16 · SGLang 0.5.23 · Llama-3-8B"


@contextlib.asynccontextmanager
async def mounted(run, size, label="lifecycle-check.yaml"):
    app = make_app(run, refresh_s=60.0, label=label)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        yield app, pilot


def visible(app, widget) -> bool:
    """The widget's whole border box lies on the screen."""
    region = widget.region
    return region.height > 0 and app.screen.region.contains_region(region)


async def test_at_80x24_the_header_wraps_instead_of_cutting(make_run):
    """At 80 columns the status line moves the engine part to a second line: no ellipsis,
    every field present."""
    async with mounted(make_run(steps=STEPS), (80, 24)) as (app, _):
        text = widget_text(app.screen.query_one(StatusBar))
        lines = text.splitlines()
        assert len(lines) == 2 and "…" not in text
        assert "step 200" in lines[0] and "paused" in lines[0]
        assert lines[1].strip() == ENGINE


async def test_at_80x24_panels_stack_and_each_is_reachable(make_run):
    """80x24: the dashboard stacks its panels in one column no wider than the terminal;
    Tab brings the tree, then the requests table, fully into view."""
    async with mounted(make_run(steps=STEPS), (80, 24)) as (app, pilot):
        screen = app.screen
        assert screen.has_class("-narrow")
        for panel_id in ("pool", "reuse", "integrity", "tree", "requests"):
            assert screen.query_one(f"#{panel_id}").region.width <= 80
        tree, table = screen.query_one(RadixTreeBrowser), screen.query_one(RequestsTable)
        for target in (tree, table):
            for _ in range(6):
                if app.focused is target:
                    break
                await pilot.press("tab")
                await pilot.pause()
            assert app.focused is target
            panel = screen.query_one("#tree" if target is tree else "#requests")
            assert visible(app, panel), (panel.region, screen.region)


async def test_at_160x50_the_header_is_whole_on_one_line(make_run):
    """160 columns hold label, clock, state and the whole engine description on one line."""
    async with mounted(make_run(steps=STEPS), (160, 50)) as (app, _):
        text = widget_text(app.screen.query_one(StatusBar))
        assert len(text.splitlines()) == 1 and "…" not in text
        assert text.rstrip().endswith(ENGINE)


async def test_at_160x50_a_long_label_wraps_rather_than_cutting(make_run):
    """A long label (a remote URL, a long scenario path) pushes the engine part to a second
    line at 160 columns instead of cutting it."""
    label = "examples/scenarios/" + "a-rather-long-scenario-name-" * 2 + "lifecycle-check.yaml"
    async with mounted(make_run(steps=STEPS), (160, 50), label=label) as (app, _):
        text = widget_text(app.screen.query_one(StatusBar))
        assert "…" not in text and label in text and ENGINE in text


async def test_tree_shows_every_node_the_requests_table_points_at(make_run):
    """Each `node` of the requests table (a live request's lease node) is mounted in the
    tree without any key press: the paths to them are opened on the first read."""
    run = make_run(steps=STEPS)
    async with mounted(run, (160, 50)) as (app, _):
        snapshot = app.screen.snapshot
        pointed = {r.lease_node for r in snapshot.requests if r.lease_node is not None}
        assert len(pointed) >= 3  # the scenario has several live requests at step 200
        browser = app.screen.query_one(RadixTreeBrowser)
        missing = [n for n in sorted(pointed) if browser.find(n) is None]
        assert missing == []
        shown = widget_text(browser)
        assert all(f"#{n} " in shown for n in pointed)

"""Pilot tests: every key binding of `kvctl monitor`, and drilling into the radix tree.

The source is the real embedded engine (SGLang's radix cache) running the shipped
lifecycle-check scenario in a LiveRun that is paused from the start and never started, so
the dashboard shows exactly the state after STEPS steps.
"""

from __future__ import annotations

import contextlib

import pytest
from tui_helpers import SIZE, widget_text

from kvctl.tui.app import make_app
from kvctl.tui.screens.flush_confirm import FlushConfirmScreen
from kvctl.tui.screens.help import HelpScreen
from kvctl.tui.screens.monitor import MonitorScreen
from kvctl.tui.widgets.requests.requests_table import RequestsTable
from kvctl.tui.widgets.status.status_bar import StatusBar
from kvctl.tui.widgets.tree.node_details import NodeDetails
from kvctl.tui.widgets.tree.radix_tree import RadixTreeBrowser

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

STEPS = 200


@contextlib.asynccontextmanager
async def mounted(run):
    app = make_app(run, refresh_s=60.0, label="lifecycle-check.yaml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        yield app, pilot


def notes(app) -> list[str]:
    return [n.message for n in app._notifications]


def status(app) -> str:
    return widget_text(app.screen.query_one(StatusBar))


async def test_question_mark_opens_and_escape_closes_help(make_run):
    """`?` shows the help overlay (with the key table); Esc returns to the dashboard."""
    async with mounted(make_run(steps=STEPS)) as (app, pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, MonitorScreen)


async def test_p_resumes_then_pauses_the_workload(make_run):
    """`p` toggles the live run: the source's paused flag and the status line follow."""
    run = make_run(steps=STEPS)
    async with mounted(run) as (app, pilot):
        assert "paused" in status(app)
        await pilot.press("p")
        assert run.paused is False
        assert "● live" in status(app)
        await pilot.press("p")
        assert run.paused is True
        assert "paused" in status(app)
        assert notes(app) == ["workload resumed", "workload paused"]


async def test_s_advances_one_step_while_paused(make_run):
    """`s` on a paused run advances exactly one engine step, and the status line shows it."""
    run = make_run(steps=STEPS)
    async with mounted(run) as (app, pilot):
        await pilot.press("s")
        assert run.snapshot().counters.steps == STEPS + 1
        assert f"step {STEPS + 1}" in status(app)


async def test_f_then_n_keeps_the_cache(make_run):
    """`f` asks first; `n` cancels and nothing is evicted."""
    run = make_run(steps=STEPS)
    before = run.snapshot().ledger.evictable_tokens
    async with mounted(run) as (app, pilot):
        await pilot.press("f")
        assert isinstance(app.screen, FlushConfirmScreen)
        await pilot.press("n")
        assert isinstance(app.screen, MonitorScreen)
        assert run.snapshot().ledger.evictable_tokens == before > 0


async def test_f_then_y_flushes_the_cache(make_run):
    """`f` then `y` evicts every unlocked prefix: evictable drops to 0 and it is reported."""
    run = make_run(steps=STEPS)
    before = run.snapshot().ledger.evictable_tokens
    async with mounted(run) as (app, pilot):
        await pilot.press("f", "y")
        await pilot.pause()
        assert run.snapshot().ledger.evictable_tokens == 0
        assert app.screen.snapshot.ledger.evictable_tokens == 0
        assert f"cache flushed: {before:,} tokens evicted" in notes(app)


async def test_q_quits_with_code_zero(make_run):
    """`q` ends the app cleanly."""
    async with mounted(make_run(steps=STEPS)) as (app, pilot):
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_slash_filter_shows_matches_and_escape_clears(make_run):
    """`/` opens the filter; a node id keeps only that node's path; Esc restores the tree."""
    async with mounted(make_run(steps=STEPS)) as (app, pilot):
        tree = app.screen.query_one(RadixTreeBrowser)
        full = len(tree.index)
        await pilot.press("slash")
        await pilot.press("#", "2", "0", "enter")
        assert tree.match_count == 1
        assert "filter '#20': 1 matches" in str(tree.root.label)
        assert tree.find(20) is not None
        await pilot.press("escape")
        assert tree.query_text == "" and len(tree.index) == full
        assert "filter" not in str(tree.root.label)


async def test_enter_on_request_jumps_to_its_path(make_run):
    """Enter on a running request puts the tree cursor on the node its lease anchors."""
    run = make_run(steps=STEPS)
    views = run.snapshot().requests
    row = next(i for i, v in enumerate(views) if v.lease_node is not None and v.state == "running")
    async with mounted(run) as (app, pilot):
        table = app.screen.query_one(RequestsTable)
        table.focus()
        table.move_cursor(row=row)
        await pilot.press("enter")
        await pilot.pause()
        tree = app.screen.query_one(RadixTreeBrowser)
        assert app.focused is tree
        assert tree.cursor_node.data.node_id == views[row].lease_node


async def test_enter_on_offloaded_session_says_it_holds_no_path(make_run):
    """An offloaded session holds no device path: the jump explains instead of moving."""
    run = make_run(steps=STEPS)
    views = run.snapshot().requests
    row = next(i for i, v in enumerate(views) if v.state == "offloaded")
    async with mounted(run) as (app, pilot):
        table = app.screen.query_one(RequestsTable)
        table.focus()
        table.move_cursor(row=row)
        await pilot.press("enter")
        assert any("holds no path" in n for n in notes(app))


async def test_drilling_into_the_tree_mounts_children_lazily(make_run):
    """The shared prefix node opens on the first read with its children mounted largest
    first; collapsing it unmounts them, expanding mounts them again, and the details line
    describes the node under the cursor."""
    run = make_run(steps=STEPS)
    async with mounted(run) as (app, pilot):
        tree = app.screen.query_one(RadixTreeBrowser)
        # the shared system prompt: the root child with the most children (the replay
        # under SGLang's scheduler may leave other, unshared, root children)
        top = max(tree.root.children, key=lambda n: tree.index.child_count(n.data.node_id))
        wanted = [n.node_id for n in tree.index.children(top.data.node_id, limit=200).shown]
        assert len(wanted) == tree.index.child_count(top.data.node_id) > 1
        assert [c.data.node_id for c in top.children] == wanted
        tree.focus()
        tree.move_cursor(top)
        await pilot.pause()
        await pilot.press("space")  # collapse
        await pilot.pause()
        assert len(top.children) == 0 and not top.is_expanded
        await pilot.press("space")  # expand: mounted again, from the index
        await pilot.pause()
        assert [c.data.node_id for c in top.children] == wanted
        await pilot.press("down")
        await pilot.pause()
        details = widget_text(app.screen.query_one(NodeDetails))
        assert details.startswith(f"#{wanted[0]}  depth 2")
        assert "last access: not observable" in details

"""Snapshot tests (pytest-textual-snapshot): the monitor at a fixed terminal size, on the
real embedded engine running a shipped scenario with seed 7, paused at a fixed step.

Each run is a deterministic function of (scenario, seed, steps); the sparklines get their
history from reads published by hand after each of the last HISTORY steps. No wall-clock
text is rendered. Update the SVGs with `pytest tests/tui --snapshot-update` after an
intended change, and look at them before committing.
"""

from __future__ import annotations

import pytest
from tui_helpers import SIZE

from kvctl.tui.app import make_app
from kvctl.tui.widgets.requests.requests_table import RequestsTable

pytestmark = pytest.mark.tui

HISTORY = 24


def history_app(run, label: str):
    """An app on `run` whose run_before steps HISTORY more times, publishing each read."""
    app = make_app(run, refresh_s=60.0, label=label)

    async def run_before(pilot) -> None:
        for _ in range(HISTORY):
            run.step_once()
            app.read_now()
        await pilot.pause()

    return app, run_before


def test_dashboard_coding_agents(snap_compare, make_run):
    """The default workload (coding agents) after 400 steps: pool, reuse, integrity,
    the tree with the shared prefix open, and the requests table."""
    run = make_run("coding-agents", steps=400 - HISTORY)
    app, run_before = history_app(run, "coding-agents.yaml (scenario, seed 7)")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_dashboard_lifecycle_check(snap_compare, make_run):
    """lifecycle-check after 200 steps: a tight pool with running, waiting, retained and
    offloaded sessions."""
    run = make_run("lifecycle-check", steps=200 - HISTORY)
    app, run_before = history_app(run, "lifecycle-check.yaml (scenario, seed 7)")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_jump_to_request_path(snap_compare, make_run):
    """Enter on the second request opens the tree at the node its lease anchors."""
    run = make_run("lifecycle-check", steps=200)
    app = make_app(run, refresh_s=60.0, label="lifecycle-check.yaml (scenario, seed 7)")

    async def run_before(pilot) -> None:
        table = app.screen.query_one(RequestsTable)
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_tree_filter(snap_compare, make_run):
    """`/` then a request id keeps only the nodes it holds and their ancestors."""
    run = make_run("lifecycle-check", steps=200)
    app = make_app(run, refresh_s=60.0, label="lifecycle-check.yaml (scenario, seed 7)")
    assert snap_compare(app, terminal_size=SIZE, press=["slash", *"coder-0", "enter"])


def test_help_screen(snap_compare, make_run):
    """`?` shows the key table and what each panel means (and what is not observable)."""
    run = make_run("lifecycle-check", steps=50)
    app = make_app(run, refresh_s=60.0, label="lifecycle-check.yaml (scenario, seed 7)")
    assert snap_compare(app, terminal_size=SIZE, press=["question_mark"])


def test_flush_confirmation(snap_compare, make_run):
    """`f` asks before flushing, with the evictable tokens at stake."""
    run = make_run("lifecycle-check", steps=200)
    app = make_app(run, refresh_s=60.0, label="lifecycle-check.yaml (scenario, seed 7)")
    assert snap_compare(app, terminal_size=SIZE, press=["f"])

"""The tree browser's paint cache: a new per-node read repaints exactly the lines whose
labels changed, including an ancestor's (whose update Textual's own cache keys every line
below it on). The source is the real embedded engine (lifecycle-check, paused); the read
is re-published with two nodes edited."""

from __future__ import annotations

import dataclasses

import pytest
from tui_helpers import SIZE, widget_text

from engine_adapter.snapshot import TreeNodes
from kvctl.tui.app import make_app
from kvctl.tui.widgets.tree.radix_tree import RadixTreeBrowser

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

STEPS = 200


async def test_a_relabelled_ancestor_and_child_are_repainted_and_nothing_else(make_run):
    """The shared prefix's recorded lock ref and its first child's pages change: those two
    lines show the new values, every other line reads as before."""
    app = make_app(make_run(steps=STEPS), refresh_s=60.0, label="lifecycle-check.yaml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        browser = app.screen.query_one(RadixTreeBrowser)
        snapshot = app.screen.snapshot
        (top,) = browser.root.children
        top_id, child_id = top.data.node_id, top.children[0].data.node_id
        top_view, child_view = browser.index.get(top_id), browser.index.get(child_id)
        before = widget_text(browser).splitlines()

        def edit(view):
            if view.node_id == top_id:
                return view._replace(recorded_lock_ref=view.recorded_lock_ref + 7)
            if view.node_id == child_id:
                return view._replace(pages=view.pages + 1000)
            return view

        edited = TreeNodes.of(edit(view) for view in snapshot.tree_nodes)
        app.publish(dataclasses.replace(snapshot, tree_nodes=edited, seq=snapshot.seq + 1))
        await pilot.pause()
        after = widget_text(browser).splitlines()

    def line_of(lines, node_id):
        (found,) = [i for i, line in enumerate(lines) if f"#{node_id}  " in line]
        return found

    top_line, child_line = line_of(before, top_id), line_of(before, child_id)
    assert (line_of(after, top_id), line_of(after, child_id)) == (top_line, child_line)
    refs = f"ref {top_view.recorded_lock_ref + 7}/{top_view.derived_lock_ref}"
    assert refs in after[top_line] and refs not in before[top_line]
    assert f"{child_view.pages + 1000:,} pg" in after[child_line]
    unchanged = [i for i in range(len(before)) if i not in (top_line, child_line)]
    assert len(unchanged) > 3
    assert [after[i] for i in unchanged] == [before[i] for i in unchanged]

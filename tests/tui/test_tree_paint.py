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


def _shared_prefix(browser):
    """The shared system prompt's node: the root child with the most children (under
    SGLang's scheduling the read may also hold other, unshared, root children)."""
    tops = browser.root.children
    top = max(tops, key=lambda n: browser.index.child_count(n.data.node_id))
    assert browser.index.child_count(top.data.node_id) > 2
    return top


async def test_a_relabelled_ancestor_and_child_are_repainted_and_nothing_else(make_run):
    """The shared prefix's recorded lock ref and its first child's pages change: those two
    lines show the new values, every other line reads as before."""
    app = make_app(make_run(steps=STEPS), refresh_s=60.0, label="lifecycle-check.yaml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        browser = app.screen.query_one(RadixTreeBrowser)
        snapshot = app.screen.snapshot
        top = _shared_prefix(browser)
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


async def test_label_widths_are_textuals_without_rendering(make_run):
    """get_label_width gives, for every mounted node (expandable or not, open or shut),
    the cell width of the label Textual's own method renders."""
    from textual.widgets import Tree

    app = make_app(make_run(steps=STEPS), refresh_s=60.0, label="lifecycle-check.yaml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        browser = app.screen.query_one(RadixTreeBrowser)
        nodes = [line.node for line in browser._tree_lines]
        assert any(n.allow_expand and n.is_expanded for n in nodes)
        assert any(not n.allow_expand for n in nodes)
        assert [browser.get_label_width(n) for n in nodes] == [
            Tree.get_label_width(browser, n) for n in nodes
        ]


async def test_a_new_hidden_child_relabels_the_more_row_in_place(make_run, monkeypatch):
    """With 2 children shown per parent, a read with one more (small) child under the
    shared prefix counts it in the same "… N more" row, relabelled, not replaced."""
    from engine_adapter.snapshot import TreeNodeView
    from kvctl.tui.widgets.tree import radix_tree
    from kvctl.tui.widgets.tree.radix_tree import MoreChildren

    monkeypatch.setattr(radix_tree, "CHILD_LIMIT", 2)
    app = make_app(make_run(steps=STEPS), refresh_s=60.0, label="lifecycle-check.yaml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        browser = app.screen.query_one(RadixTreeBrowser)
        snapshot = app.screen.snapshot
        top = _shared_prefix(browser)
        (marker,) = [c for c in top.children if isinstance(c.data, MoreChildren)]
        hidden = marker.data.hidden
        rows = [c for c in top.children if not isinstance(c.data, MoreChildren)]
        assert hidden == browser.index.child_count(top.data.node_id) - len(rows) > 0
        new_id = max(snapshot.tree_nodes.node_id) + 1
        extra = TreeNodeView(node_id=new_id, parent_id=top.data.node_id, depth=2, tokens=1,
                             pages=1, recorded_lock_ref=0, derived_lock_ref=0)
        grown = TreeNodes.of((*snapshot.tree_nodes, extra))
        app.publish(dataclasses.replace(snapshot, tree_nodes=grown, seq=snapshot.seq + 1))
        await pilot.pause()
        markers = [c for c in top.children if isinstance(c.data, MoreChildren)]
        shown = widget_text(browser)
    assert markers == [marker] and marker.data.hidden == hidden + 1
    assert f"… {hidden + 1:,} more (largest 2 shown" in shown


def _screen_lines(app) -> list[str]:
    """The whole frame as the compositor renders it from the widgets' caches now."""
    update = app.screen._compositor.render_update(full=True)
    return ["".join(strip.text for strip in line) for line in update.strips]


async def test_a_read_without_structural_change_repaints_only_what_is_stale(make_run):
    """A new read relabels mounted nodes (every node's tokens grow) without adding or
    removing any: the browser marks only relabelled lines for repaint, and the frame it
    shows then is the one a full repaint of the browser shows (no stale line), with the
    new sizes in it."""
    app = make_app(make_run(steps=STEPS), refresh_s=60.0, label="lifecycle-check.yaml")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        browser = app.screen.query_one(RadixTreeBrowser)
        snapshot = app.screen.snapshot
        before = _screen_lines(app)
        grown = TreeNodes.of(v._replace(tokens=v.tokens + 1) for v in snapshot.tree_nodes)
        structure = browser._updates
        app.publish(dataclasses.replace(snapshot, tree_nodes=grown, seq=snapshot.seq + 1))
        await pilot.pause()
        assert browser._updates == structure  # relabels only
        shown = _screen_lines(app)
        browser.refresh()
        await pilot.pause()
        repainted = _screen_lines(app)
    assert shown == repainted
    assert shown != before
    top = grown[0]
    assert any(f"#{top.node_id}  {top.tokens:,} tok" in line for line in shown)

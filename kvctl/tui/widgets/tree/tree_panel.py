"""The Radix tree area: the lazy browser, the details of the node under the cursor, and
the `/` filter. It keeps the last per-node read: snapshots without one (`refs.per_node`
False, `tree_nodes == ()`) leave the browser as it was."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static, Tree

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.messages import TreeFilterChanged
from kvctl.tui.tree_index import index_for
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotPanel
from kvctl.tui.widgets.tree.node_details import NodeDetails
from kvctl.tui.widgets.tree.radix_tree import NodeRow, RadixTreeBrowser
from kvctl.tui.widgets.tree.tree_filter import TreeFilter


def remote_tree_text(snapshot: Snapshot) -> Text:
    tree = snapshot.tree
    return Text.assemble(
        ("radix tree browser: ", "bold"), (fmt.NOT_OBSERVABLE_REMOTE, "yellow"),
        ("\nSGLang publishes no per-node lock refs or namespaces. KV-event mirror: ", "dim"),
        _mirror(tree),
    )  # fmt: skip


def _mirror(tree) -> str:
    # A remote mirror knows pages, not radix nodes: `nodes` stays None while it is attached
    if tree.cached_tokens is None:
        return "not attached (no KV-event stream)"
    leaves = fmt.DASH if tree.leaves is None else f"{tree.leaves:,}"
    nodes = "" if tree.nodes is None else f"{tree.nodes:,} nodes, "
    return f"{nodes}{tree.cached_tokens:,} cached tokens, {leaves} leaves"


class TreePanel(SnapshotPanel):
    PANEL_TITLE = "Radix tree"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._nodes_shown: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="tree-remote")
        yield RadixTreeBrowser(id="radix-tree")
        yield NodeDetails(id="node-details")
        yield TreeFilter(id="tree-filter")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#tree-remote").display = False
        self.query_one(TreeFilter).display = False
        self.query_one(NodeDetails).show(None, None)

    @property
    def browser(self) -> RadixTreeBrowser:
        return self.query_one(RadixTreeBrowser)

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        remote = fmt.is_remote(snapshot)
        self.query_one("#tree-remote").display = remote
        self.browser.display = not remote
        self.query_one(NodeDetails).display = not remote
        if remote:
            self.query_one("#tree-remote", Static).update(remote_tree_text(snapshot))
            return
        if not snapshot.refs.per_node or snapshot.tree_nodes is self._nodes_shown:
            return  # keep showing the last per-node read
        self._nodes_shown = snapshot.tree_nodes
        leased = frozenset(r.lease_node for r in snapshot.requests if r.lease_node is not None)
        self.browser.show_index(
            index_for(snapshot.tree_nodes), read_at_step=snapshot.counters.steps, leased=leased
        )
        self._describe_cursor()

    # ---- operator actions ------------------------------------------------------------------

    def open_filter(self) -> None:
        box = self.query_one(TreeFilter)
        box.display = True
        box.value = self.browser.query_text
        box.focus()

    def on_tree_filter_changed(self, message: TreeFilterChanged) -> None:
        message.stop()
        matches = self.browser.apply_filter(message.query)
        box = self.query_one(TreeFilter)
        box.display = False
        self.browser.focus()
        if message.query:
            self.notify(f"filter '{message.query}': {matches} matching nodes", timeout=3)

    def clear_filter(self) -> bool:
        """Clear an active filter; False when there was none."""
        if not self.browser.query_text:
            return False
        self.browser.apply_filter("")
        return True

    def jump_to(self, rid: str, node_id: int | None) -> str | None:
        """Open the path `rid` holds; returns why it could not (None on success)."""
        browser = self.browser
        if browser.index is None:
            return "no per-node tree read yet"
        target = node_id if node_id is not None else browser.index.node_held_by(rid)
        if target is None:
            return f"{rid} holds no path in the tree (not admitted yet, or finished)"
        if browser.jump_to(target) is None:
            return (
                f"node #{target} of {rid} is not in the per-node read of step "
                f"{fmt.count(browser.read_at_step)}; it shows after the next read"
            )
        browser.focus()
        return None

    # ---- details ----------------------------------------------------------------------------

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        self._describe_cursor(event.node.data)

    def _describe_cursor(self, data=None) -> None:
        if data is None:
            cursor = self.browser.cursor_node
            data = cursor.data if cursor is not None else None
        node_id = data.node_id if isinstance(data, NodeRow) else None
        self.query_one(NodeDetails).show(self.browser.index, node_id)

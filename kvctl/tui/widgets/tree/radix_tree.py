"""The radix tree browser: a Textual `Tree` over a `TreeIndex`, expanded lazily.

Only children of expanded nodes are mounted, at most CHILD_LIMIT per parent (largest
first, then a "… N more" leaf), so a 100k-node tree mounts a few hundred widgets' worth of
lines. A new per-node read re-syncs only the mounted part: labels change in place, a child
list is rebuilt only when its membership changed, and expansion survives across reads.

    _expanded  node ids whose children are mounted (ROOT included)
    _keep      the filter's matches plus their ancestors (None: no filter)
    _matches   the filter's matches (their own children are not filtered)
    _pinned    the path of the last jump (shown even beyond CHILD_LIMIT)
    _leased    the paths to the nodes the requests table points at (shown even beyond
               CHILD_LIMIT); each such node's path is opened once, the first read it
               appears in, so the table's `node` column always names a visible node
               until the operator collapses it

Painting: Textual's `Tree` caches a painted line under a key that holds the update count
of every node on the line's path, so relabelling one ancestor (the shared prefix's lock
refs change on almost every read) repaints every line below it, and a line 35 levels deep
costs about a millisecond. `_render_line` keeps a second cache whose key holds what a line
shows: its own node's updates, its position, and the hover/selection state of its path
(which colours the guides); structural changes bump the Tree's own count, in both keys.
So after a new read without structural change only the visible lines of relabelled nodes
are marked for repaint (`_repaint`), not the whole widget.
A structural change makes Textual rebuild its line list and measure every mounted label;
`get_label_width` measures without rendering, and a changed "… N more" count relabels its
row instead of replacing it (no structural change). Relies on Textual 8.2's `Tree`
internals (requirements/kvctl.txt pins it).
"""

from __future__ import annotations

from typing import NamedTuple

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.cache import LRUCache
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from kvctl.tui import format as fmt
from kvctl.tui.tree_index import ROOT, TreeIndex
from kvctl.tui.widgets.tree.node_label import label_key, node_label, row_key

CHILD_LIMIT = 200
FILTER_LIMIT = 200


class NodeRow(NamedTuple):
    node_id: int
    key: tuple  # label_key() of what the label shows now


class MoreChildren(NamedTuple):
    parent_id: int | None
    hidden: int


class RadixTreeBrowser(Tree[NodeRow | MoreChildren | None]):
    def __init__(self, **kwargs) -> None:
        self._painted: LRUCache[tuple, Strip] = LRUCache(1024)  # before Tree may clear it
        super().__init__("radix tree: no per-node read yet", data=None, **kwargs)
        self.index: TreeIndex | None = None
        self.read_at_step: int | None = None
        self.query_text = ""
        self.match_count = 0
        self._expanded: set[int | None] = {ROOT}
        self._saved_expanded: set[int | None] | None = None
        self._keep: set[int] | None = None
        self._matches: set[int] = set()
        self._pinned: set[int] = set()
        self._leased: set[int] = set()
        self._revealed: set[int] = set()
        self._shown_anyway: set[int] = set()  # _pinned | _leased, once per sync
        self._relabelled: list[TreeNode] = []  # by the current sync, for _repaint
        self._opened_prefix = False
        self.root.expand()

    # ---- painting ------------------------------------------------------------------------

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        lines = self._tree_lines
        if y >= len(lines):
            return super()._render_line(y, x1, x2, base_style)
        line = lines[y]
        key = (
            y, x1, x2, base_style, self._updates, self._pseudo_class_state, self.has_focus,
            self.hover_line == y, self.cursor_line == y, self.size.width,
            self.virtual_size.width, line.last, line.node._id, line.node._updates,
            tuple((node._hover_, node._selected_) for node in line.path),
        )  # fmt: skip
        strip = self._painted.get(key)
        if strip is None:
            strip = self._painted[key] = super()._render_line(y, x1, x2, base_style)
        return strip

    def _clear_line_cache(self) -> None:
        super()._clear_line_cache()
        self._painted.clear()

    def get_label_width(self, node: TreeNode) -> int:
        """What Textual's default measures (the rendered label: toggle icon, then the
        label), without rendering it: Textual measures every mounted line this way on each
        rebuild of its line list, which a new child or a removed one triggers."""
        if not node.allow_expand:
            return node.label.cell_len
        icon = self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE
        return cell_len(icon) + node.label.cell_len

    # ---- inputs ----------------------------------------------------------------------------

    def show_index(
        self, index: TreeIndex, *, read_at_step: int | None, leased: frozenset[int] = frozenset()
    ) -> None:
        """Display a new per-node read, keeping expansion, filter and cursor where possible.
        `leased`: the nodes live requests point at; paths to new ones are opened."""
        if not self._opened_prefix and index.child_count(ROOT) == 1:
            # open the shared prefix once, on the first read that has one; later the
            # operator's own expand/collapse decides
            self._expanded.add(index.children(ROOT, limit=1).shown[0].node_id)
            self._opened_prefix = True
        self.index, self.read_at_step = index, read_at_step
        if self.query_text:
            self._compute_filter()
        self._expanded = {n for n in self._expanded if n is ROOT or n in index}
        self._reveal(index, leased)
        self._sync_all()

    def _reveal(self, index: TreeIndex, leased: frozenset[int]) -> None:
        if self.query_text:  # the filter's view decides what is open; reveal after it clears
            self._leased = set()
            return
        wanted = tuple(leased)
        rows = index.rows_of(wanted).tolist()  # one lookup for every leased node
        present = {n for n, row in zip(wanted, rows) if row >= 0}
        self._leased = index.ancestors(present)
        for node_id in present - self._revealed:
            self._expanded |= set(index.path(node_id)[:-1])
        self._revealed = (self._revealed & present) | present

    def apply_filter(self, query: str) -> int:
        """Show only nodes matching `query` and the paths to them; "" restores the full view.
        Returns the number of matches (capped at FILTER_LIMIT)."""
        query = query.strip()
        if query and not self.query_text:
            self._saved_expanded = set(self._expanded)
        if not query and self.query_text and self._saved_expanded is not None:
            self._expanded, self._saved_expanded = self._saved_expanded, None
        self.query_text = query
        if query:
            self._compute_filter()
        else:
            self._keep, self._matches, self.match_count = None, set(), 0
        self._sync_all()
        return self.match_count

    def jump_to(self, node_id: int) -> TreeNode | None:
        """Expand the path to `node_id` and put the cursor on it; None if it is not in the
        last per-node read."""
        if self.index is None or node_id not in self.index:
            return None
        path = self.index.path(node_id)
        self._pinned = set(path)
        self._expanded |= {ROOT, *path[:-1]}
        if self._keep is not None:
            self._keep |= set(path)
        self._sync_all()
        target = self.find(node_id)
        if target is not None:
            self.call_after_refresh(self.move_cursor, target)
        return target

    def find(self, node_id: int) -> TreeNode | None:
        """The mounted tree node showing `node_id`, if any."""
        if self.index is None:
            return None
        current = self.root
        for step in self.index.path(node_id):
            current = next(
                (
                    c
                    for c in current.children
                    if isinstance(c.data, NodeRow) and c.data.node_id == step
                ),
                None,
            )
            if current is None:
                return None
        return current

    # ---- expansion events ------------------------------------------------------------------

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        node_id = _node_id(event.node)
        if node_id in self._expanded or isinstance(event.node.data, MoreChildren):
            return
        self._expanded.add(node_id)
        if self.index is not None:
            self._shown_anyway = self._pinned | self._leased
            self._sync(event.node, node_id)
            self.refresh()

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed) -> None:
        node_id = _node_id(event.node)
        self._expanded.discard(node_id)
        event.node.remove_children()

    # ---- sync --------------------------------------------------------------------------------

    def _compute_filter(self) -> None:
        matches = self.index.matches(self.query_text, limit=FILTER_LIMIT) if self.index else []
        self._matches = set(matches)
        self.match_count = len(matches)
        self._keep = self.index.keep_for(matches) if self.index else set()
        parents = {self.index.parent_of(n) for n in self._keep} if self.index else set()
        self._expanded = {ROOT} | parents

    def _sync_all(self) -> None:
        structure = self._updates  # Textual's Tree bumps it on every structural change
        self._relabelled = []
        self._relabel(self.root, self._root_label())
        if self.index is not None:
            self._shown_anyway = self._pinned | self._leased
            self._sync(self.root, ROOT)
        self._repaint(structural=self._updates != structure)

    def _relabel(self, node: TreeNode, label: Text) -> None:
        """`TreeNode.set_label` without its repaint message: set_label queues, per node, a
        scan of every visible line to repaint the node's and all lines below it (which the
        paint cache makes needless); `_sync_all` repaints once instead."""
        node._label = self.process_label(label)
        node._updates += 1
        self._relabelled.append(node)

    def _repaint(self, *, structural: bool) -> None:
        """After a sync: repaint the whole browser when its lines changed, else only the
        visible lines of relabelled nodes. A line shows its own node's label and the
        state of its path (the paint cache's key), so no other line can have changed, and
        the rest of the widget and the screen below it are not re-rendered."""
        if structural:
            self.refresh()
            return
        changed = {node._id for node in self._relabelled}
        top = self.scroll_offset.y
        for y, line in enumerate(self._tree_lines[top : top + self.size.height], top):
            if line.node._id in changed:
                self._refresh_line(y)

    def _root_label(self) -> Text:
        if self.index is None:
            return Text("radix tree: no per-node read yet", style="dim")
        label = Text.assemble(
            ("root", "bold"), f"  {len(self.index):,} nodes",
            (f"  per-node read at step {fmt.count(self.read_at_step)}", "dim"),
        )  # fmt: skip
        if self.query_text:
            capped = "+" if self.match_count >= FILTER_LIMIT else ""
            label.append(
                f"  filter '{self.query_text}': {self.match_count}{capped} matches",
                style="bold yellow",
            )
        return label

    def _sync(self, tree_node: TreeNode, node_id: int | None) -> None:
        index = self.index
        if node_id not in self._expanded:
            if tree_node.is_expanded and tree_node is not self.root:
                tree_node.collapse()  # its arrow must not claim children it no longer shows
            if tree_node.children:
                tree_node.remove_children()
            return
        keep = None if node_id in self._matches else self._keep
        page = index.child_rows(node_id, limit=CHILD_LIMIT, keep=keep,
                                pinned=self._shown_anyway)
        nodes = index.nodes
        wanted = [nodes.node_id[row] for row in page.rows]
        mounted = [c.data.node_id for c in tree_node._children if isinstance(c.data, NodeRow)]
        if wanted != mounted:
            tree_node.remove_children()
            for row, children in zip(page.rows, page.child_counts):
                view = nodes.row(row)
                tree_node.add(
                    node_label(view, children),
                    data=NodeRow(view.node_id, label_key(view, children)),
                    expand=view.node_id in self._expanded,
                    allow_expand=children > 0,
                )
        else:  # the same children: relabel only those whose label changed
            for child, row, children in zip(tree_node.children, page.rows, page.child_counts):
                key = row_key(nodes, row, children)
                if child.data.key != key:
                    child.data = NodeRow(child.data.node_id, key)
                    self._relabel(child, node_label(nodes.row(row), children))
                    child.allow_expand = children > 0
        self._sync_more(tree_node, node_id, page.hidden)
        if not tree_node.is_expanded:
            tree_node.expand()
        expanded = self._expanded
        for child in tree_node._children:  # Textual's list: .children wraps it per call
            data = child.data
            if isinstance(data, NodeRow) and (data.node_id in expanded or child._children):
                self._sync(child, data.node_id)

    def _sync_more(self, tree_node: TreeNode, node_id: int | None, hidden: int) -> None:
        last = tree_node.children[-1] if tree_node.children else None
        marker = last if last is not None and isinstance(last.data, MoreChildren) else None
        if marker is not None and not hidden:
            marker.remove()
        elif marker is not None and marker.data.hidden != hidden:  # relabel: no new line
            marker.data = MoreChildren(node_id, hidden)
            self._relabel(marker, _more_text(hidden))
        elif hidden and marker is None:
            tree_node.add_leaf(_more_text(hidden), data=MoreChildren(node_id, hidden))


def _more_text(hidden: int) -> Text:
    return Text(
        f"… {hidden:,} more (largest {CHILD_LIMIT} shown; / to filter)", style="dim italic"
    )


def _node_id(tree_node: TreeNode) -> int | None:
    data = tree_node.data
    return data.node_id if isinstance(data, NodeRow) else ROOT

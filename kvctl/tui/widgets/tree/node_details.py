"""The details line under the tree browser: everything known about the node under the cursor."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from kvctl.tui.tree_index import TreeIndex
from kvctl.tui.widgets.tree.node_label import LAST_ACCESS_NOTE, details_text

HINT = "Enter/Space: expand · Enter on a request: open its path · /: filter · Esc: clear"


class NodeDetails(Static):
    DEFAULT_CSS = "NodeDetails { height: 3; color: $text; }"

    def show(self, index: TreeIndex | None, node_id: int | None) -> None:
        """Describe `node_id` in `index`; the usage hint when nothing is selected."""
        view = index.get(node_id) if index is not None else None
        if view is None:
            hint = Text.assemble((HINT, "dim"), "\n", (LAST_ACCESS_NOTE, "dim"))
            hint.no_wrap, hint.overflow = True, "ellipsis"
            self.update(hint, layout=False)
            return
        self.update(
            details_text(
                view,
                prefix_tokens=index.path_tokens(view.node_id),
                children=index.child_count(view.node_id),
            ),
            layout=False,
        )

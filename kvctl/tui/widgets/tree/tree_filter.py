"""The `/` filter box under the tree: Enter applies the query, Escape clears and closes."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input

from kvctl.tui.messages import TreeFilterChanged


class TreeFilter(Input):
    BINDINGS = [Binding("escape", "clear_filter", "Clear filter", show=False)]

    def __init__(self, **kwargs) -> None:
        super().__init__(
            placeholder="filter: #node id, request id, namespace, medium (Enter)", **kwargs
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(TreeFilterChanged(query=event.value.strip()))

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(TreeFilterChanged(query=""))

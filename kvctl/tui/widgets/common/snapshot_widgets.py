"""Base classes for widgets that render a `Snapshot`: a typed reactive plus a watcher.

A panel (`SnapshotPanel`) binds its children's `snapshot` to its own with `data_bind`, and
the dashboard screen binds every panel to its `snapshot`, so one assignment on the screen
re-renders the whole dashboard through watchers. `always_update` skips the dataclass
equality test (a 100k-node `tree_nodes` tuple would make it slow); the app publishes each
snapshot sequence number once.
"""

from __future__ import annotations

from collections.abc import Hashable

from rich.console import RenderableType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from engine_adapter.snapshot import Snapshot
from kvctl.tui.widgets.common.static_update import update_static

WAITING = "waiting for the first snapshot…"


class SnapshotStatic(Static):
    """A Static whose content is `render_snapshot(snapshot)`; subclasses implement that.

    A new layout (which measures every widget's content again) is requested only when
    `layout_key(snapshot)` changes; subclasses whose height depends on the data say how.
    Content equal to what is shown is not re-rendered (`update_static`).
    """

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)
    _NO_KEY = object()

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            update_static(self, WAITING, layout=True)
            return
        key = self.layout_key(snapshot)
        relayout = key != getattr(self, "_layout_key", self._NO_KEY)
        self._layout_key = key
        update_static(self, self.render_snapshot(snapshot), layout=relayout)

    def layout_key(self, snapshot: Snapshot) -> Hashable:
        """What the rendered height depends on (default: only local vs remote)."""
        return snapshot.info.engine

    def render_snapshot(self, snapshot: Snapshot) -> RenderableType:  # pragma: no cover
        raise NotImplementedError


class SnapshotPanel(Vertical):
    """A bordered dashboard area; `PANEL_TITLE` becomes its border title."""

    PANEL_TITLE = ""
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)

    def on_mount(self) -> None:
        self.border_title = self.PANEL_TITLE

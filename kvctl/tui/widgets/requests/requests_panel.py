"""The Requests area: counts per state and the table (not observable on a remote source)."""

from __future__ import annotations

from textual.app import ComposeResult

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotPanel
from kvctl.tui.widgets.requests.requests_table import RequestsTable
from kvctl.tui.widgets.requests.state_counts import StateCounts


class RequestsPanel(SnapshotPanel):
    PANEL_TITLE = "Requests"

    def compose(self) -> ComposeResult:
        yield StateCounts().data_bind(RequestsPanel.snapshot)
        yield RequestsTable(id="requests-table").data_bind(RequestsPanel.snapshot)

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is not None:
            self.query_one(RequestsTable).display = not fmt.is_remote(snapshot)

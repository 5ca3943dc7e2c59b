"""The Fleet area: every replica's ledger and hit rate beside their sum, and the router's own
counts (kvctl/tui/fleet_rows.py, the same rows `kvctl inspect` prints). Shown only when the
source is a fleet (`Snapshot.replicas` non-empty); the other panels then show the sum."""

from __future__ import annotations

from collections.abc import Hashable

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult

from engine_adapter.snapshot import Snapshot
from kvctl.tui.fleet_rows import columns, fleet_rows, router_state
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotPanel, SnapshotStatic


class FleetTable(SnapshotStatic):
    """One row per replica (DOWN and "unknown" for one that did not answer), then the sum."""

    def layout_key(self, snapshot: Snapshot) -> Hashable:
        return len(snapshot.replicas), snapshot.router is not None

    def render_snapshot(self, snapshot: Snapshot) -> RenderableType:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for column in columns(snapshot):  # "DOWN" and "unknown" are never cut short
            table.add_column(column, justify="left" if column == "replica" else "right",
                             no_wrap=True, min_width=7 if column != "replica" else 10)
        rows = fleet_rows(snapshot)
        for row in rows[:-1]:
            style = "bold red" if row[1] == "DOWN" else ""
            table.add_row(Text(row[0].removeprefix("http://")),
                          *(Text(cell, style=style if k == 0 else "")
                            for k, cell in enumerate(row[1:])))
        total = rows[-1]
        table.add_row(*(Text(cell, style="bold yellow" if "partial" in total[0] else "bold")
                        for cell in total))
        line = router_state(snapshot.router)
        return table if line is None else Group(table, Text(line, style="dim"))


class FleetPanel(SnapshotPanel):
    PANEL_TITLE = "Fleet"

    def compose(self) -> ComposeResult:
        yield FleetTable().data_bind(FleetPanel.snapshot)

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        self.display = snapshot is not None and bool(snapshot.replicas)

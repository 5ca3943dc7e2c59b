"""Active alerts, each with the evidence that makes it true (never a bare threshold)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from engine_adapter.snapshot import Snapshot
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic

SEVERITY_STYLES = {"critical": "bold red", "warning": "bold yellow", "info": "bold cyan"}


def alert_lines(snapshot: Snapshot) -> Group | Text:
    if not snapshot.alerts:
        return Text.assemble(("alerts ", "dim"), ("none", "green"))
    lines = []
    for alert in snapshot.alerts:
        style = SEVERITY_STYLES.get(alert.severity, "bold")
        lines.append(
            Text.assemble(
                ("● ", style),
                (f"{alert.severity} ", style),
                (alert.name, "bold"),
                ": ",
                (alert.evidence, ""),
            )
        )
    return Group(*lines)


class AlertsList(SnapshotStatic):
    def layout_key(self, snapshot: Snapshot):
        # evidence wraps: its length (in 16-character steps) decides the height
        return tuple((alert.name, len(alert.evidence) // 16) for alert in snapshot.alerts)

    def render_snapshot(self, snapshot: Snapshot) -> Group | Text:
        return alert_lines(snapshot)

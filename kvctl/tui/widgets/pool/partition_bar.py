"""The pool partition bar: free, evictable, protected, private (and any residual) in colour."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from engine_adapter.snapshot import PoolLedger, Snapshot
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic
from kvctl.tui.widgets.pool.partition import SEGMENT_STYLES, cells, segments


class PartitionRenderable:
    """Draws the bar at whatever width the console offers (known only at render time)."""

    def __init__(self, ledger: PoolLedger) -> None:
        self.ledger = ledger

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        parts = segments(self.ledger)
        bar = Text()
        for part, count in zip(parts, cells(parts, options.max_width)):
            char = "░" if part.name == "free" else "█"
            bar.append(char * count, style=SEGMENT_STYLES[part.name])
        yield bar


class PartitionBar(SnapshotStatic):
    DEFAULT_CSS = "PartitionBar { height: 1; }"

    def render_snapshot(self, snapshot: Snapshot) -> PartitionRenderable:
        return PartitionRenderable(snapshot.ledger)

"""The Pool area: partition bar, ledger, and U_KV vs token_usage over time."""

from __future__ import annotations

from textual.app import ComposeResult

from kvctl.tui.widgets.common.snapshot_widgets import SnapshotPanel
from kvctl.tui.widgets.pool.ledger_table import LedgerTable
from kvctl.tui.widgets.pool.partition_bar import PartitionBar
from kvctl.tui.widgets.pool.usage_history import UsageHistory


class PoolPanel(SnapshotPanel):
    PANEL_TITLE = "Pool"

    def compose(self) -> ComposeResult:
        yield PartitionBar().data_bind(PoolPanel.snapshot)
        yield LedgerTable().data_bind(PoolPanel.snapshot)
        yield UsageHistory().data_bind(PoolPanel.snapshot)

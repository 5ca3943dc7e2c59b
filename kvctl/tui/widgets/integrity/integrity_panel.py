"""The Integrity area: refcount reconciliation, mapping lag and active alerts."""

from __future__ import annotations

from textual.app import ComposeResult

from kvctl.tui.widgets.common.snapshot_widgets import SnapshotPanel
from kvctl.tui.widgets.integrity.alerts_list import AlertsList
from kvctl.tui.widgets.integrity.mapping_lag import MappingLagLine
from kvctl.tui.widgets.integrity.ref_check import RefCheck


class IntegrityPanel(SnapshotPanel):
    PANEL_TITLE = "Integrity"

    def compose(self) -> ComposeResult:
        yield RefCheck().data_bind(IntegrityPanel.snapshot)
        yield MappingLagLine().data_bind(IntegrityPanel.snapshot)
        yield AlertsList().data_bind(IntegrityPanel.snapshot)

"""The Prefix reuse area: H_prefix over time, hit/recomputed tokens, and the funnel."""

from __future__ import annotations

from textual.app import ComposeResult

from kvctl.tui.widgets.common.snapshot_widgets import SnapshotPanel
from kvctl.tui.widgets.reuse.funnel_table import FunnelTable
from kvctl.tui.widgets.reuse.hit_rate_history import HitRateHistory


class ReusePanel(SnapshotPanel):
    PANEL_TITLE = "Prefix reuse"

    def compose(self) -> ComposeResult:
        yield HitRateHistory().data_bind(ReusePanel.snapshot)
        yield FunnelTable().data_bind(ReusePanel.snapshot)

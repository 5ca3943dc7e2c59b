"""The dashboard screen: status line, Pool / Prefix reuse / Integrity on the left, the radix
tree browser and the requests table on the right; above them, across the screen and for a
fleet only, every replica beside the sum (Fleet).

It owns the typed reactive `snapshot` (and `run_state`); every panel binds to it with
`data_bind`, so `screen.snapshot = s` re-renders the dashboard through watchers.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer

from engine_adapter.snapshot import Snapshot
from kvctl.tui.messages import JumpToRequestPath
from kvctl.tui.widgets.fleet.fleet_panel import FleetPanel
from kvctl.tui.widgets.integrity.integrity_panel import IntegrityPanel
from kvctl.tui.widgets.pool.pool_panel import PoolPanel
from kvctl.tui.widgets.requests.requests_panel import RequestsPanel
from kvctl.tui.widgets.reuse.reuse_panel import ReusePanel
from kvctl.tui.widgets.status.disconnected_banner import DisconnectedBanner
from kvctl.tui.widgets.status.status_bar import StatusBar
from kvctl.tui.widgets.tree.tree_panel import TreePanel

NARROW_BELOW = 150  # columns


class MonitorScreen(Screen):
    BINDINGS = [
        Binding("slash", "filter", "Filter tree"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)
    run_state: reactive[str] = reactive("starting", repaint=False)

    def __init__(self, label: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.label = label

    def compose(self) -> ComposeResult:
        yield StatusBar(self.label, id="status").data_bind(
            MonitorScreen.snapshot, MonitorScreen.run_state
        )
        yield DisconnectedBanner(id="banner")
        yield FleetPanel(id="fleet").data_bind(MonitorScreen.snapshot)  # full width
        with Container(id="dashboard"):
            with VerticalScroll(id="left"):
                yield PoolPanel(id="pool").data_bind(MonitorScreen.snapshot)
                yield ReusePanel(id="reuse").data_bind(MonitorScreen.snapshot)
                yield IntegrityPanel(id="integrity").data_bind(MonitorScreen.snapshot)
            with VerticalScroll(id="right"):
                yield TreePanel(id="tree").data_bind(MonitorScreen.snapshot)
                yield RequestsPanel(id="requests").data_bind(MonitorScreen.snapshot)
        yield Footer()

    def show_source_state(self, snapshot: Snapshot, *, last_good_seq: int | None) -> None:
        """Banner and greying for a disconnected `snapshot`; both cleared when connected."""
        banner = self.query_one(DisconnectedBanner)
        if snapshot.connected:
            banner.hide()
        else:
            banner.show_down(snapshot, last_good_seq=last_good_seq)
        self.set_class(not snapshot.connected and last_good_seq is not None, "-stale")

    def on_resize(self, event: events.Resize) -> None:
        # side by side needs two ~80-column panels; narrower terminals stack them and scroll
        self.set_class(event.size.width < NARROW_BELOW, "-narrow")

    def action_filter(self) -> None:
        self.query_one(TreePanel).open_filter()

    def action_clear_filter(self) -> None:
        if self.query_one(TreePanel).clear_filter():
            self.notify("tree filter cleared", timeout=2)

    def on_jump_to_request_path(self, message: JumpToRequestPath) -> None:
        problem = self.query_one(TreePanel).jump_to(message.rid, message.node_id)
        if problem is not None:
            self.notify(problem, severity="warning")

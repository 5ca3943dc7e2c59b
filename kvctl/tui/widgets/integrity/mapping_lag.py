"""Mapping lag (seed 000 0x06, 0x0CF): L_map = max(0, f_required - f_ready) for K/V that
must be resident before a request can run (a host-tier reload after a tool wait)."""

from __future__ import annotations

from rich.text import Text

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic


def mapping_line(snapshot: Snapshot) -> Text:
    lag = snapshot.mapping
    if lag is None or fmt.is_remote(snapshot):  # host-tier load-back progress is not exported
        return Text.assemble(("mapping lag ", "dim"), (fmt.unobservable(snapshot), "dim"))
    return Text.assemble(
        ("L_map ", "dim"), (f"{lag.lag_tokens:,} tok", "bold yellow" if lag.lag_tokens else "bold"),
        ("  waiting ", "dim"), f"{lag.waiting_requests}",
        ("  oldest wait ", "dim"), fmt.seconds(lag.max_wait_seconds),
        ("  stalls ", "dim"), _stalls(lag),
    )  # fmt: skip


def _stalls(lag) -> str:
    if lag.stalls_total is None:
        return fmt.NOT_OBSERVABLE
    seconds = (
        "" if lag.stall_seconds_total is None else f" ({fmt.seconds(lag.stall_seconds_total)})"
    )
    return f"{lag.stalls_total}{seconds}"


class MappingLagLine(SnapshotStatic):
    def render_snapshot(self, snapshot: Snapshot) -> Text:
        return mapping_line(snapshot)

"""How many requests are in each state: running, prefill, waiting, reloading, and the
sessions paused on a tool wait (retained on device, offloaded to the host tier)."""

from __future__ import annotations

from collections import Counter

from rich.text import Text

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic

STATES = ("running", "prefill", "waiting", "reloading", "retained", "offloaded")
STATE_STYLES = {
    "running": "green", "prefill": "cyan", "waiting": "yellow", "reloading": "magenta",
    "retained": "blue", "offloaded": "bright_black", "finished": "dim",
}  # fmt: skip


def state_counts_line(snapshot: Snapshot) -> Text:
    if fmt.is_remote(snapshot):
        return Text.assemble(
            ("requests ", "dim"),
            (fmt.NOT_OBSERVABLE_REMOTE, "dim"),
            (": SGLang publishes queue depths, not per-request state", "dim"),
        )
    counts = Counter(view.state for view in snapshot.requests)
    parts: list = []
    for state in STATES:
        parts += [(state, STATE_STYLES[state]), " ", (f"{counts.get(state, 0)}", "bold"), "   "]
    return Text.assemble(*parts)


class StateCounts(SnapshotStatic):
    def render_snapshot(self, snapshot: Snapshot) -> Text:
        return state_counts_line(snapshot)

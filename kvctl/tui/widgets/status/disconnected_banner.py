"""The line under the status bar while the source is down (issue 16 section 1).

A disconnected source is never drawn as healthy: while it is down this banner says so and
why, and the dashboard below is greyed (`-stale`, kvctl.tcss) when it still shows the last
good read, or left empty when there never was one (a placeholder is not a reading, so its
zeros are never drawn). Hidden (display: none) while the source is connected.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from engine_adapter.snapshot import Snapshot


def down_reason(snapshot: Snapshot) -> str:
    """The evidence of the source's critical alert (why it is down), on one line."""
    evidence = next((a.evidence for a in snapshot.alerts if a.severity == "critical"), None)
    return " ".join((evidence or "the source reports itself disconnected").split())


def banner_text(snapshot: Snapshot, *, last_good_seq: int | None) -> Text:
    """`✖ DISCONNECTED · what the numbers below are · why` (the reason last: it is the part
    a narrow terminal may cut)."""
    if last_good_seq is None:
        shown = "no reading yet: nothing is shown until the source answers"
    else:
        shown = f"the numbers below are STALE (last good read #{last_good_seq:,}), greyed"
    text = Text.assemble(("✖ DISCONNECTED", "bold"), f" · {shown} · {down_reason(snapshot)}")
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


class DisconnectedBanner(Static):
    DEFAULT_CSS = """
    DisconnectedBanner { display: none; height: 1; background: $error; color: $text; }
    DisconnectedBanner.-shown { display: block; }
    """

    def show_down(self, snapshot: Snapshot, *, last_good_seq: int | None) -> None:
        self.update(banner_text(snapshot, last_good_seq=last_good_seq))
        self.add_class("-shown")

    def hide(self) -> None:
        self.remove_class("-shown")

"""The prefix-hit funnel (seed 000 0x0CF): each stage in requests and tokens, and the
rejection bucket that takes what is lost on the way to the next stage.

    requests >= authorized >= candidates >= ... >= executed_hits
       stage[i] - stage[i + 1] == rejection[i]   (requests and tokens)

A stage the source cannot observe prints as "—" with a caption saying so, never as 100%.
Rendered as fixed-width Text (not a Rich Table): it is redrawn on every refresh.
"""

from __future__ import annotations

from rich.text import Text

from engine_adapter.funnel import Funnel
from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic

# stage | req | tokens | lost to (bucket) | req | tokens
WIDTHS = (18, 5, 9, 23, 5, 9)
HEADER = ("stage", "req", "tokens", "lost to", "req", "tokens")


def _cell(text: str, width: int, *, right: bool) -> str:
    return (text.rjust(width) if right else text.ljust(width))[:width] + " "


def _count(value: int | None) -> str:
    return fmt.DASH if value is None else f"{value:,}"


def funnel_text(snapshot: Snapshot) -> Text:
    funnel: Funnel = snapshot.funnel
    text = Text()
    for index, name in enumerate(HEADER):
        text.append(_cell(name, WIDTHS[index], right=index in (1, 2, 4, 5)), style="dim")
    for index, stage in enumerate(funnel.stages):
        text.append("\n")
        text.append(_cell(stage.name, WIDTHS[0], right=False))
        for value, width in ((stage.requests, WIDTHS[1]), (stage.tokens, WIDTHS[2])):
            text.append(
                _cell(_count(value), width, right=True), style="dim" if value is None else ""
            )
        if index < len(funnel.rejections):
            bucket = funnel.rejections[index]
            lost = bool(bucket.requests or bucket.tokens)
            text.append(
                _cell(bucket.reason, WIDTHS[3], right=False), style="yellow" if lost else "dim"
            )
            for value, width in ((bucket.requests, WIDTHS[4]), (bucket.tokens, WIDTHS[5])):
                text.append(
                    _cell(_count(value), width, right=True), style="red" if value else "dim"
                )
    hidden = [s.name for s in funnel.stages if s.requests is None]
    if hidden:
        text.append(f"\n{fmt.DASH} {fmt.unobservable(snapshot)}: {', '.join(hidden)}", style="dim")
    return text


class FunnelTable(SnapshotStatic):
    def layout_key(self, snapshot: Snapshot):
        return tuple(stage.requests is None for stage in snapshot.funnel.stages)

    def render_snapshot(self, snapshot: Snapshot) -> Text:
        return funnel_text(snapshot)

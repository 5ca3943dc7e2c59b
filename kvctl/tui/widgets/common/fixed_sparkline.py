"""A one-line sparkline on a fixed 0..1 scale (U_KV, token_usage, H_prefix).

Textual's `Sparkline` rescales to its data's own min..max, which makes a flat 0.19 look
like a flat 0.92; utilisations are compared by eye against each other and against 1.0, so
this one keeps the scale fixed. The newest point is on the right.

    value 0.0 -> " "   (0, 1/8] -> "▁"  ...  (7/8, 1] -> "█"
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kvctl.util.pages import ceil_div

BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline_text(values: Sequence[float], width: int) -> str:
    """The last `width` values as block characters (ceil to the next eighth, clamp 0..1)."""
    out = []
    for value in values[-width:] if width > 0 else ():
        clamped = min(1.0, max(0.0, value))
        level = 0 if clamped == 0 else max(1, ceil_div(round(clamped * 8000), 1000))
        out.append(BLOCKS[level])
    return "".join(out)


class FixedSparkline(Widget):
    """Renders `values` (0..1) on one line, right aligned. Set `values` to a new tuple."""

    DEFAULT_CSS = "FixedSparkline { height: 1; width: 1fr; }"
    values: reactive[tuple[float, ...]] = reactive(tuple)

    def __init__(self, *, style: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._style = style

    def render(self) -> Text:
        width = self.size.width
        line = sparkline_text(self.values, width)
        return Text(line.rjust(width), style=self._style)

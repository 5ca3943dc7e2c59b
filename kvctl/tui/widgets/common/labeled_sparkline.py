"""One labelled history line: `label  ▁▂▃▅▆  0.618` on a fixed 0..1 scale."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from kvctl.tui.widgets.common.fixed_sparkline import FixedSparkline
from kvctl.tui.widgets.common.static_update import update_static


class LabeledSparkline(Horizontal):
    DEFAULT_CSS = """
    LabeledSparkline { height: 1; }
    LabeledSparkline > .spark-label { width: 13; color: $text-muted; }
    LabeledSparkline > .spark-value { width: 7; text-align: right; }
    """

    def __init__(self, label: str, *, style: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._label = label
        self._style = style

    def compose(self) -> ComposeResult:
        yield Static(self._label, classes="spark-label")
        yield FixedSparkline(style=self._style)
        yield Static("", classes="spark-value")

    def show(self, values: Sequence[float], latest: str) -> None:
        """Replace the plotted values and the number printed after them."""
        self.query_one(FixedSparkline).values = tuple(values)
        update_static(self.query_one(".spark-value", Static), latest)

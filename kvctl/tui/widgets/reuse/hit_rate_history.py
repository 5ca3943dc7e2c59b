"""H_prefix (seed 003 eq. 2) over time, hit and recomputed tokens, and the four prefix
lengths of seed 000 0x07A (S_sem, S_indexed, S_cap, S_runtime), summed over admissions, and
the what-if shadow's "2x pool: a% -> b%" estimate (docs/curve.md)."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.series import HISTORY_POINTS, windowed_rate
from kvctl.tui.widgets.common.labeled_sparkline import LabeledSparkline
from kvctl.tui.widgets.common.static_update import update_static

WINDOW_READS = 8  # the sparkline's H_prefix covers the prompts of the last 8 changed reads


def tokens_line(snapshot: Snapshot) -> Text:
    funnel = snapshot.funnel
    return Text.assemble(
        fmt.label_value("H_prefix", fmt.ratio(snapshot.hit_rate)), ("  cumulative   ", "dim"),
        fmt.label_value("hit", fmt.tokens(funnel.hit_tokens), value_style="bold green"), "  ",
        fmt.label_value("recomputed", fmt.tokens(funnel.recomputed_tokens), value_style="bold red"),
        ("  tok", "dim"),
    )  # fmt: skip


def lengths_line(snapshot: Snapshot) -> Text:
    lengths = snapshot.funnel.lengths

    def value(amount: int | None) -> str:
        return "n/o" if amount is None else f"{amount:,}"

    return Text.assemble(
        fmt.label_value("S_sem", value(lengths.semantic), value_style=""), "  ",
        fmt.label_value("S_indexed", value(lengths.indexed), value_style=""), "  ",
        fmt.label_value("S_cap", value(lengths.cap), value_style=""), "  ",
        fmt.label_value("S_runtime", value(lengths.runtime), value_style=""),
    )  # fmt: skip


def whatif_line(snapshot: Snapshot) -> Text:
    """The sampled shadow's 2x estimate, worded as in `kvctl inspect` (fmt.whatif)."""
    return fmt.label_value("what-if", fmt.whatif(snapshot), value_style="")


class HitRateHistory(Vertical):
    DEFAULT_CSS = "HitRateHistory { height: auto; } HitRateHistory > Static { height: 1; }"
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._points: deque[tuple[int, int]] = deque(maxlen=HISTORY_POINTS + WINDOW_READS)
        self._last_seq: int | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="reuse-tokens")
        yield LabeledSparkline(
            f"H_prefix/{WINDOW_READS}r", style="bold green", id="hit-rate-history"
        )
        yield Static("", id="reuse-lengths")
        yield Static("", id="reuse-whatif")

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        funnel = snapshot.funnel
        if snapshot.seq != self._last_seq:
            self._last_seq = snapshot.seq
            self._points.append((funnel.prompt_tokens, funnel.hit_tokens))
        # the oldest WINDOW_READS points only seed the windows of the points after them
        rates = windowed_rate(self._points, WINDOW_READS)[-HISTORY_POINTS:]
        update_static(self.query_one("#reuse-tokens", Static), tokens_line(snapshot))
        self.query_one("#hit-rate-history", LabeledSparkline).show(
            rates, fmt.ratio(rates[-1]) if funnel.prompt_tokens else "n/a"
        )
        update_static(self.query_one("#reuse-lengths", Static), lengths_line(snapshot))
        update_static(self.query_one("#reuse-whatif", Static), whatif_line(snapshot))

"""U_KV (seed 003 eq. 8) next to SGLang's token_usage, now and over the recent reads.

token_usage counts evictable (cached, unlocked) tokens as free, so it can read low while
the pool is full of cache; the gap between the two lines is exactly that evictable share.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.series import Series
from kvctl.tui.widgets.common.labeled_sparkline import LabeledSparkline
from kvctl.tui.widgets.common.static_update import update_static


def usage_line(snapshot: Snapshot) -> Text:
    ledger = snapshot.ledger
    return Text.assemble(
        fmt.label_value("U_KV", fmt.ratio(ledger.u_kv)), "   ",
        fmt.label_value("token_usage", fmt.ratio(ledger.token_usage)), "   ",
        fmt.label_value("evictable gap", fmt.ratio(ledger.evictable_gap), value_style="cyan"),
    )  # fmt: skip


class UsageHistory(Vertical):
    DEFAULT_CSS = "UsageHistory { height: auto; } UsageHistory > Static { height: 1; }"
    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._u_kv = Series()
        self._token_usage = Series()

    def compose(self) -> ComposeResult:
        yield Static("", id="usage-now")
        yield LabeledSparkline("U_KV", style="bold yellow", id="u-kv-history")
        yield LabeledSparkline("token_usage", style="green", id="token-usage-history")

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        ledger = snapshot.ledger
        self._u_kv.push(snapshot.seq, ledger.u_kv)
        self._token_usage.push(snapshot.seq, ledger.token_usage)
        update_static(self.query_one("#usage-now", Static), usage_line(snapshot))
        self.query_one("#u-kv-history", LabeledSparkline).show(
            self._u_kv.values(), fmt.ratio(ledger.u_kv)
        )
        self.query_one("#token-usage-history", LabeledSparkline).show(
            self._token_usage.values(), fmt.ratio(ledger.token_usage)
        )

"""The `f` confirmation: flushing evicts every unlocked cached prefix of the embedded engine."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class FlushConfirmScreen(ModalScreen[bool]):
    """Dismisses with True (flush) or False (keep the cache)."""

    BINDINGS = [
        Binding("y", "confirm", "Flush"),
        Binding("n", "cancel", "Cancel"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, evictable_tokens: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.evictable_tokens = evictable_tokens

    def compose(self) -> ComposeResult:
        with Vertical(id="flush-box") as box:
            box.border_title = "Flush the cache?"
            yield Static(
                f"Evicts every unlocked cached prefix ({self.evictable_tokens:,} evictable tokens "
                "now). Paths locked by running or retained requests stay. The hit rate drops "
                "until the cache warms up again.\n\n[b]y[/b] flush    [b]n[/b] / Esc cancel"
            )
            with Horizontal(id="flush-buttons"):
                yield Button("Flush", variant="error", id="flush-yes")
                yield Button("Cancel", variant="primary", id="flush-no")

    def on_mount(self) -> None:
        self.query_one("#flush-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "flush-yes")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)

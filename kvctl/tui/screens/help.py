"""The `?` overlay: keys, what each panel means, and what cannot be observed."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("?", "this help (Esc or ? closes it)"),
    ("p", "pause / resume the workload (embedded only)"),
    ("s", "advance one engine step while paused (embedded only)"),
    ("/", "filter the radix tree: #node id, request id, namespace or medium; Enter applies"),
    ("Esc", "clear the tree filter"),
    ("f", "flush the cache: evict every unlocked prefix (embedded only, asks first)"),
    ("Enter", "on a request: open the tree at the path it holds; on a node: expand"),
    ("Tab", "move between the tree and the requests table"),
    ("q", "quit"),
)

NOTES = (
    (
        "Pool",
        "N_pool = free + evictable + protected + private (seed 000 0x0CF); a non-zero "
        "residual is a leak. U_KV = allocated / total (seed 003 eq. 8) counts evictable "
        "cache; SGLang's token_usage does not: the gap is the evictable share.",
    ),
    (
        "Prefix reuse",
        "H_prefix = sum S_match / sum S_prompt (seed 003 eq. 2): cumulative, and "
        "over the last 8 reads in the sparkline. The funnel drops each request into "
        "exactly one rejection bucket (seed 000 0x0CF).",
    ),
    (
        "Integrity",
        "delta_ref = recorded lock_ref - leases that explain it (seed 000 0x04B); "
        "L_map = max(0, f_required - f_ready) with the oldest wait (seed 000 0x06).",
    ),
    (
        "Radix tree",
        "Per-node reads come about once a second and the browser keeps the last one. "
        "Label: id, tokens, pages, recorded/derived lock refs, hashed namespace (— when "
        "no lease explains the node), medium. Last access time is not observable: "
        "SGLang's per-node printout does not include it.",
    ),
    (
        "Remote",
        "A --url source is read-only (no pause, step or flush). Per-request state, "
        "per-node lock refs, the funnel's middle stages and mapping lag are not published "
        "by SGLang and show as not observable (remote).",
    ),
)


def help_renderable() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for key, meaning in KEYS:
        table.add_row(key, meaning)
    table.add_row("", "")
    for area, note in NOTES:
        table.add_row(Text(area, style="bold"), Text(note))
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box") as box:
            box.border_title = "kvctl monitor: keys and meanings"
            yield Static(help_renderable())

"""The requests table: one row per live request or paused session (`RequestView`).

A Line-API widget (a `ScrollView`): it renders only the rows on screen, so a refresh with
the engine's full list (up to 500 views) costs what is visible, not what exists (Textual's
DataTable re-measures every row it is given; that alone took most of a 100 ms frame).

    line 0          header (does not scroll)
    line y >= 1     row scroll_y + y - 1

Up/Down/PgUp/PgDn/Home/End move the cursor, which stays on the same request id across
refreshes; Enter (or a double click) posts `JumpToRequestPath` for the row under it.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from engine_adapter.snapshot import RequestView, Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.messages import JumpToRequestPath
from kvctl.tui.widgets.requests.state_counts import STATE_STYLES

RID_WIDTH = 16
# (header, width, right-aligned); the namespace is in the tree's labels and details.
COLUMNS = (("request", RID_WIDTH, False), ("state", 9, False), ("prompt", 7, True),
           ("out", 5, True), ("hit", 7, True), ("hit %", 6, True), ("retain", 8, False),
           ("node", 6, False))  # fmt: skip
TABLE_WIDTH = sum(width + 1 for _, width, _ in COLUMNS)


def row_cells(view: RequestView) -> tuple[tuple[str, str], ...]:
    """(text, style) per column for one request; no prompt text, no token ids."""
    paused = view.state in ("retained", "offloaded")
    rid = view.rid if len(view.rid) <= RID_WIDTH else "…" + view.rid[-(RID_WIDTH - 1) :]
    return (
        (rid, ""),
        (view.state, STATE_STYLES.get(view.state, "")),
        (f"{view.prompt_tokens:,}", ""),
        (f"{view.output_tokens:,}", ""),
        (f"{view.prefix_hit_tokens:,}", ""),
        ("" if paused else fmt.share(view.prefix_hit_tokens, view.prompt_tokens), ""),
        (view.retention or "default", ""),
        (fmt.DASH if view.lease_node is None else f"#{view.lease_node}", ""),
    )


def _segments(cells, base: Style) -> list[Segment]:
    out: list[Segment] = []
    for (text, style), (_, width, right) in zip(cells, COLUMNS):
        text = text[:width]
        padded = text.rjust(width) if right else text.ljust(width)
        out.append(Segment(padded + " ", base + Style.parse(style) if style else base))
    return out


class RequestsTable(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "move(-1000000)", show=False),
        Binding("end", "move(1000000)", show=False),
        Binding("enter", "select", "Open path", show=False),
    ]
    COMPONENT_CLASSES = {"requests-table--header", "requests-table--cursor"}
    DEFAULT_CSS = """
    RequestsTable > .requests-table--header { text-style: bold; color: $text-muted; }
    RequestsTable > .requests-table--cursor { background: $block-cursor-blurred-background; }
    RequestsTable:focus > .requests-table--cursor { background: $block-cursor-background;
        color: $block-cursor-foreground; text-style: bold; }
    """

    snapshot: reactive[Snapshot | None] = reactive(None, always_update=True, repaint=False)
    cursor_row: reactive[int] = reactive(0)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: tuple[RequestView, ...] = ()

    # ---- data ------------------------------------------------------------------------------

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None or snapshot.requests is self.rows:
            return
        keep = self.cursor_rid
        self.rows = snapshot.requests
        self.virtual_size = Size(TABLE_WIDTH, len(self.rows) + 1)
        rids = [view.rid for view in self.rows]
        self.cursor_row = (
            rids.index(keep) if keep in rids else min(self.cursor_row, max(0, len(rids) - 1))
        )
        self.refresh()

    @property
    def cursor_rid(self) -> str | None:
        return self.rows[self.cursor_row].rid if 0 <= self.cursor_row < len(self.rows) else None

    def move_cursor(self, row: int) -> None:
        """Put the cursor on `row` (clamped) and scroll it into view."""
        self.cursor_row = max(0, min(row, len(self.rows) - 1))

    def watch_cursor_row(self, old: int, new: int) -> None:
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_y)
        if new < top:
            self.scroll_to(y=new, animate=False)
        elif new >= top + visible:
            self.scroll_to(y=new - visible + 1, animate=False)
        self.refresh()

    # ---- actions ---------------------------------------------------------------------------

    def action_move(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * max(1, self.size.height - 2))

    def action_select(self) -> None:
        if self.cursor_rid is not None:
            view = self.rows[self.cursor_row]
            self.post_message(JumpToRequestPath(rid=view.rid, node_id=view.lease_node))

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self.move_cursor(int(self.scroll_y) + event.y - 1)
            if event.chain >= 2:
                self.action_select()

    # ---- rendering -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            header = self.get_component_rich_style("requests-table--header")
            cells = tuple((name, "") for name, _, _ in COLUMNS)
            return Strip(_segments(cells, base + header)).crop_extend(0, width, base)
        index = int(self.scroll_y) + y - 1
        if index >= len(self.rows):
            return Strip.blank(width, base)
        style = base
        if index == self.cursor_row:
            style = base + self.get_component_rich_style("requests-table--cursor")
        return Strip(_segments(row_cells(self.rows[index]), style)).crop_extend(0, width, style)

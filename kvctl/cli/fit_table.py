"""A Rich Table that never cuts a number or a name: too wide for the terminal, it splits.

Rich fits a table wider than the console by shrinking columns, which turns `1,556,663`
into `1,556,…` and `bandwidth` into `bandwi…`. `FitTable` measures itself at render time
and, when its natural width exceeds the space it is given, renders as several tables that
each fit, every one repeating the key column(s) (the first, unless `key_columns` says):

    | key | a | b | c | d | e |          | key | a | b | c |      (title)
                                  --->   | key | d | e |          (title, continued)

Cells are never truncated; a single key + column pair wider than the window still wraps
as Rich would. Use it wherever a command prints a table (`kvctl size`, `plan`, `replay`,
`check`, `inspect`): `FitTable(...)` takes exactly `rich.table.Table`'s arguments.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Column, Table

_UNBOUNDED = 10_000
_TABLE_SETTINGS = (
    "box", "safe_box", "padding", "collapse_padding", "pad_edge", "expand", "show_header",
    "show_footer", "show_edge", "show_lines", "leading", "style", "row_styles", "header_style",
    "footer_style", "border_style", "title_style", "caption_style", "title_justify",
    "caption_justify", "highlight",
)


class FitTable(Table):
    """A `rich.table.Table` that splits by columns instead of truncating (module docstring).

    `key_columns` leading columns (default 1) are repeated in every part.
    """

    def __init__(self, *args, key_columns: int = 1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.key_columns = key_columns

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if len(self.columns) <= self.key_columns + 1 or self._natural_width(console, options) <= options.max_width:
            yield from super().__rich_console__(console, options)
            return
        groups = self._column_groups(console, options)
        for index, group in enumerate(groups):
            yield self._sub_table(group, first=index == 0)

    def _natural_width(self, console: Console, options: ConsoleOptions, table: Table | None = None) -> int:
        target = self if table is None else table
        # Rich's own Table measurement (FitTable's rendering would recurse)
        return Table.__rich_measure__(target, console, options.update_width(_UNBOUNDED)).maximum

    def _column_groups(self, console: Console, options: ConsoleOptions) -> list[list[int]]:
        """Greedy: keys + [k, k+1, ...] while the sub-table fits, then keys + [j, ...]."""
        keys = list(range(self.key_columns))
        groups: list[list[int]] = []
        current = list(keys)
        for index in range(self.key_columns, len(self.columns)):
            trial = current + [index]
            if len(current) > len(keys) and self._natural_width(
                    console, options, self._sub_table(trial, first=True)) > options.max_width:
                groups.append(current)
                current = keys + [index]
            else:
                current = trial
        groups.append(current)
        return groups

    def _sub_table(self, indexes: list[int], *, first: bool) -> Table:
        settings = {name: getattr(self, name) for name in _TABLE_SETTINGS}
        title = self.title if first or self.title is None else f"{self.title} (continued)"
        table = Table(title=title, caption=self.caption if first else None, **settings)
        for index in indexes:
            column: Column = self.columns[index]
            table.add_column(
                column.header, footer=column.footer, header_style=column.header_style,
                footer_style=column.footer_style, style=column.style, justify=column.justify,
                vertical=column.vertical, overflow=column.overflow, width=column.width,
                min_width=column.min_width, max_width=column.max_width, ratio=column.ratio,
                no_wrap=column.no_wrap)
        cells = [list(self.columns[index].cells) for index in indexes]
        for row_index, row in enumerate(self.rows):
            table.add_row(*(column_cells[row_index] for column_cells in cells),
                          style=row.style, end_section=row.end_section)
        return table

"""Shared parsing and rendering for the `kvctl plan` commands.

Parsers turn option strings into plain numbers and raise `InputError` (exit 2, one line);
`emit` prints either the `--json` document or a Rich table followed by one "why" line per
recommendation. Nothing here computes a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from kvctl.cli.fit_table import FitTable
from kvctl.cli.output import console, print_json
from kvctl.cli.size_text import parse_size
from kvctl.errors import InputError

def parse_int_list(text: str, *, name: str, low: int = 1) -> tuple[int, ...]:
    """'33,25,16' -> (33, 25, 16). InputError naming `name` on anything but comma-separated
    integers >= `low` (1: lengths and sizes; 0 where an empty part is meaningful)."""
    try:
        values = tuple(int(part) for part in str(text).split(",") if part.strip())
    except ValueError:
        raise InputError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not values:
        raise InputError(f"{name}: expected at least one integer")
    for value in values:
        if value < low:
            raise InputError(f"{name}: every value must be >= {low}, got {value}")
    return values


def parse_size_list(texts: Iterable[str], *, name: str) -> tuple[int, ...]:
    """Repeated or comma-separated sizes -> bytes each (a bare number is bytes); InputError
    naming `name` when no size is given."""
    sizes = tuple(
        parse_size(part, name, default_unit="b")
        for text in texts for part in str(text).split(",") if part.strip()
    )
    if not sizes:
        raise InputError(f"{name}: expected at least one size")
    return sizes


@dataclass(frozen=True)
class Rendered:
    """What a command shows: a title, tables, one 'why' line per recommendation, and the
    assumptions (kvctl.sizing.budget.Assumption) the numbers rest on."""

    title: str
    tables: Sequence[Table]
    why: Sequence[str] = ()
    assumptions: Sequence[Any] = ()


def emit(as_json: bool, document: dict[str, Any], rendered: Rendered) -> None:
    """Print the JSON document (`--json`) or the Rich rendering."""
    if as_json:
        print_json(document)
        return
    out = console()
    out.print(rendered.title, highlight=False)
    for table in rendered.tables:
        # On a terminal Rich fits the table to the window; in a pipe or a file there is no
        # window, so print at the table's natural width instead of truncating at 80 columns.
        target = out
        if not out.is_terminal:
            natural = Measurement.get(out, out.options.update_width(1000), table).maximum
            target = Console(file=out.file, width=max(out.width, natural), soft_wrap=False)
        target.print(table)
    # A pipe gets each line whole (for grep); a terminal wraps them at word boundaries.
    whole_lines = not out.is_terminal
    for line in rendered.why:
        out.print(f"why: {line}", highlight=False, soft_wrap=whole_lines)
    for item in rendered.assumptions:
        out.print(f"assumes: {item.name}: {item.value} ({item.source})", highlight=False,
                  soft_wrap=whole_lines)
    if rendered.tables:
        from kvctl.cli.glossary_terms import FOOTER

        out.print(FOOTER, highlight=False, style="dim")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A plain Rich table (split rather than cut when too wide: FitTable); the first column
    left-aligned, the rest right-aligned."""
    result = FitTable(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for index, column in enumerate(columns):
        result.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
    for row in rows:
        result.add_row(*(str(cell) for cell in row))
    return result


def ms(seconds: float) -> str:
    """Seconds as milliseconds with one decimal ('46.7 ms')."""
    return f"{seconds * 1e3:,.1f} ms"


def secs(seconds: float) -> str:
    """Seconds, three significant digits ('1.30 s'), or ms below one second."""
    return ms(seconds) if seconds < 1 else f"{seconds:,.3g} s"

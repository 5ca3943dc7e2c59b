"""Test support: is a rendering readable at 80 columns, with no number or name cut?

The check renders the same thing twice, on a 400-column and an 80-column console, and
requires of the narrow one: no line longer than 80 cells, no ellipsis ("…", Rich's mark
for a truncated cell), and every word of the wide rendering present whole (a number split
across two lines, or `bandwi…`, loses a word). Words are whitespace-separated runs with the
box-drawing characters removed.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from rich.console import Console
from typer.testing import CliRunner

_BOX = re.compile(r"[\u2500-\u257f]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def render(renderable, width: int) -> str:
    """`renderable` as plain text on a `width`-column console."""
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, legacy_windows=False).print(renderable)
    return out.getvalue()


def words(text: str) -> set[str]:
    return set(_BOX.sub(" ", text).split())


def problems(wide: str, narrow: str, width: int = 80) -> list[str]:
    """What makes `narrow` (the `width`-column rendering of `wide`) lose information."""
    found = [f"line of {len(line)} cells: {line!r}" for line in narrow.splitlines()
             if len(line) > width]
    if "…" in narrow:
        found.append("an ellipsis: a cell was truncated")
    missing = sorted(words(wide) - words(narrow))
    if missing:
        found.append(f"words cut or lost: {missing[:12]}")
    return found


def assert_renderable_fits(renderable) -> str:
    """Assert `renderable` reads whole at 80 columns; returns the 80-column text."""
    narrow = render(renderable, 80)
    assert problems(render(renderable, 400), narrow) == [], narrow
    return narrow


def cli_at(width: int, invoke: Callable[..., object], *args: str) -> str:
    """The CLI's stdout on a `width`-column terminal (FORCE_COLOR makes Rich treat the
    captured stream as a terminal, NO_COLOR keeps colours out; styles are stripped)."""
    env = {"COLUMNS": str(width), "FORCE_COLOR": "1", "NO_COLOR": "1", "TERM": "xterm"}
    result = invoke(list(args), env)
    assert result.exit_code == 0, result.output
    return _ANSI.sub("", result.stdout)


def assert_cli_fits(app, *args: str) -> str:
    """Assert `kvctl ARGS` reads whole on an 80-column terminal; returns that text."""
    def invoke(argv, env):
        return CliRunner().invoke(app, argv, env=env)

    narrow = cli_at(80, invoke, *args)
    assert problems(cli_at(400, invoke, *args), narrow) == [], narrow
    return narrow

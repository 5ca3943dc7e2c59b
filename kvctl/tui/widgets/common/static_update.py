"""`update_static`: `Static.update` that skips content equal to what the widget shows.

Most of the dashboard re-renders its text on every snapshot, and most of it reads the same
as the snapshot before (a funnel, a state line, an alert list change a few times a minute).
`Static.update` marks the whole widget for repaint whatever the content, and each repaint
re-renders it to strips and re-composes its screen region (benchmarks/bench_tui.py). Equal
content is detected for `str`, Rich `Text` (text, spans and every attribute that shapes
rendering) and `Group`s of those; anything else (custom renderables) always updates.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

_SHOWN = "_kvctl_shown"  # the content last passed to update_static, on the widget


def same_content(a: object, b: object) -> bool:
    """True when `a` and `b` render identically (False when unsure)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, str):
        return a == b
    if isinstance(a, Text):
        return (a.plain, a.spans, a.style, a.justify, a.overflow, a.no_wrap, a.end,
                a.tab_size) == (b.plain, b.spans, b.style, b.justify, b.overflow, b.no_wrap,
                                b.end, b.tab_size)  # fmt: skip
    if isinstance(a, Group):
        ours, theirs = a.renderables, b.renderables
        return a.fit == b.fit and len(ours) == len(theirs) and all(
            same_content(x, y) for x, y in zip(ours, theirs)
        )
    return False


def update_static(widget: Static, content, *, layout: bool = False) -> bool:
    """`widget.update(content, layout=layout)` unless `content` is the same as what the
    last call showed and no layout is asked for. Returns whether it updated."""
    if not layout and same_content(getattr(widget, _SHOWN, None), content):
        return False
    setattr(widget, _SHOWN, content)
    widget.update(content, layout=layout)
    return True

"""update_static: equal content is not re-sent to the widget; anything else is."""

from __future__ import annotations

import pytest
from rich.console import Group
from rich.text import Text

from kvctl.tui.widgets.common.static_update import same_content, update_static

pytestmark = pytest.mark.tui


class FakeStatic:
    def __init__(self) -> None:
        self.updates: list[tuple[object, bool]] = []

    def update(self, content, *, layout: bool = True) -> None:
        self.updates.append((content, layout))


def test_same_content_compares_what_renders():
    """Text equal in text, spans and rendering attributes is the same; a different style,
    span, justify or a Group member is not; unknown renderables never are."""
    a = Text.assemble(("12", "bold"), " tok")
    assert same_content(a, Text.assemble(("12", "bold"), " tok"))
    assert not same_content(a, Text.assemble(("12", "red"), " tok"))
    assert not same_content(a, Text.assemble("12", " tok"))
    assert not same_content(a, Text.assemble(("12", "bold"), " tok", justify="right"))
    assert same_content("x", "x") and not same_content("x", Text("x"))
    assert same_content(Group(a, "y"), Group(Text.assemble(("12", "bold"), " tok"), "y"))
    assert not same_content(Group(a, "y"), Group(a, "z"))
    thing = object()
    assert not same_content(thing, thing)


def test_update_static_skips_only_equal_content_without_layout():
    widget = FakeStatic()
    assert update_static(widget, Text("a"))
    assert not update_static(widget, Text("a"))
    assert update_static(widget, Text("b"))
    assert update_static(widget, Text("b"), layout=True)  # a layout pass is never skipped
    assert [(c.plain, layout) for c, layout in widget.updates] == [
        ("a", False), ("b", False), ("b", True)]

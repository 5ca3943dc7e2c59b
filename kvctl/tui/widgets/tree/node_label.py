"""How one radix node reads in the browser and in the details line (pure).

    #12  4,176 tok  261 pg  ref 1/1  ns-37a8eec1ce19  device  +3
    id   tokens     pages   recorded/derived lock refs  namespace  medium  children

A recorded/derived mismatch (delta_ref != 0, seed 000 0x04B) is red. The namespace is the
hashed label of the leases holding the node, or "—" when no lease explains it (SGLang's
printout does not name a node's namespace).
"""

from __future__ import annotations

from rich.control import strip_control_codes
from rich.text import Span, Text

from engine_adapter.snapshot import TreeNodes, TreeNodeView
from kvctl.tui import format as fmt

LAST_ACCESS_NOTE = "last access: not observable (SGLang's per-node printout omits it)"
LAST_ACCESS_NOTE_SHORT = "last access: not observable"


def label_key(view: TreeNodeView, children: int) -> tuple:
    """Everything the label shows: relabel a mounted node only when this changes."""
    return (
        view.tokens,
        view.pages,
        view.recorded_lock_ref,
        view.derived_lock_ref,
        view.namespace,
        view.medium,
        children,
    )


def row_key(nodes: TreeNodes, row: int, children: int) -> tuple:
    """`label_key()` of row `row` of a per-node read, read from its columns: deciding that
    a mounted label is unchanged builds no `TreeNodeView`."""
    return (
        nodes.tokens[row],
        nodes.pages[row],
        nodes.recorded_lock_ref[row],
        nodes.derived_lock_ref[row],
        nodes.namespace[row],
        nodes.medium[row],
        children,
    )


def ref_style(view: TreeNodeView) -> str:
    if view.recorded_lock_ref != view.derived_lock_ref:
        return "bold red"
    return "yellow" if view.recorded_lock_ref else "dim"


def node_label(view: TreeNodeView, children: int) -> Text:
    """The browser's label for `view`: `assembled_label()`'s text and styles, built as one
    string and its spans (a new read relabels dozens of mounted nodes; Rich's
    `Text.assemble` appends, and sanitizes, part by part at ~4x the cost)."""
    namespace = strip_control_codes(view.namespace) if view.namespace else fmt.DASH
    medium = strip_control_codes(view.medium)
    parts = (
        (f"#{view.node_id}", "bold"), ("  ", ""), (f"{view.tokens:,} tok", ""), ("  ", ""),
        (f"{view.pages:,} pg", "dim"), ("  ", ""), ("ref ", "dim"),
        (f"{view.recorded_lock_ref}/{view.derived_lock_ref}", ref_style(view)), ("  ", ""),
        (namespace, "cyan" if view.namespace else "dim"), ("  ", ""),
        (medium, "dim"), (f"  +{children}" if children else "", "dim"),
    )  # fmt: skip
    spans = []
    offset = 0
    for text, style in parts:
        end = offset + len(text)
        if style and end > offset:
            spans.append(Span(offset, end, style))
        offset = end
    return Text("".join(text for text, _ in parts), spans=spans)


def assembled_label(view: TreeNodeView, children: int) -> Text:
    """`node_label()` the plain way (Rich's `Text.assemble`): the reference it must equal."""
    return Text.assemble(
        (f"#{view.node_id}", "bold"), "  ", f"{view.tokens:,} tok", "  ",
        (f"{view.pages:,} pg", "dim"), "  ", ("ref ", "dim"),
        (f"{view.recorded_lock_ref}/{view.derived_lock_ref}", ref_style(view)), "  ",
        (view.namespace or fmt.DASH, "cyan" if view.namespace else "dim"), "  ",
        (view.medium, "dim"), (f"  +{children}" if children else "", "dim"),
    )  # fmt: skip


def details_text(view: TreeNodeView, *, prefix_tokens: int, children: int) -> Text:
    """Three short lines (the details box is 3 rows, about 76 columns, no wrapping)."""
    delta = view.recorded_lock_ref - view.derived_lock_ref
    shown = ", ".join(view.holders[:3])
    more = f" +{len(view.holders) - 3}" if len(view.holders) > 3 else ""
    text = Text.assemble(
        (f"#{view.node_id}", "bold"), (f"  depth {view.depth}  ", "dim"),
        f"{view.tokens:,} tok  {view.pages:,} pg", ("  prefix ", "dim"), f"{prefix_tokens:,} tok",
        ("  children ", "dim"), f"{children:,}",
        "\n", ("lock_ref ", "dim"), f"{view.recorded_lock_ref}", (" recorded ", "dim"),
        f"{view.derived_lock_ref}", (" derived  delta_ref ", "dim"),
        (fmt.signed(delta), "bold red" if delta else "green"),
        ("  holders ", "dim"), (shown or fmt.DASH) + more,
        "\n", (view.namespace or fmt.DASH, "cyan" if view.namespace else "dim"),
        f"  {view.medium}  ", (LAST_ACCESS_NOTE_SHORT, "dim"),
    )  # fmt: skip
    text.no_wrap, text.overflow = True, "ellipsis"
    return text

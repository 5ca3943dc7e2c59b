"""Refcount reconciliation (seed 000 0x04B, 0x0CF): delta_ref = recorded - derived.

Every snapshot carries the token-level check (protected tokens recorded by the tree versus
the union of paths live leases lock). Per-node lock refs arrive only with per-node reads
(a live run takes one about once a second); between them this widget keeps showing the
last per-node result, labelled with the step it was read at.
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from engine_adapter.snapshot import RefReconciliation, Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic

MAX_OFF_NODES = 5


def token_level_line(snapshot: Snapshot) -> Text:
    refs = snapshot.refs
    delta = refs.delta_protected_tokens
    if delta is None:
        return Text.assemble(("delta_ref ", "dim"), (fmt.unobservable(snapshot), "dim"))
    return Text.assemble(
        ("protected tokens ", "dim"), ("recorded ", "dim"), f"{refs.recorded_protected_tokens:,}",
        (" derived ", "dim"), f"{refs.derived_protected_tokens:,}", ("  Δ ", "dim"),
        (fmt.signed(delta), "bold red" if delta else "green"),
        ("  from ", "dim"), f"{refs.leases}", (" leases", "dim"),
    )  # fmt: skip


def per_node_lines(refs: RefReconciliation | None, read_at_step: int | None) -> list[Text]:
    if refs is None:
        return [Text("delta_ref per node: no per-node read yet", style="dim")]
    worst = refs.delta_ref_max or 0
    head = Text.assemble(
        ("delta_ref ", "dim"), (f"max |Δ| {worst}", "bold red" if worst else "bold green"),
        ("  over ", "dim"), f"{refs.nodes_checked or 0:,}", (" nodes", "dim"),
        (f"  (per-node read at step {fmt.count(read_at_step)})", "dim"),
    )  # fmt: skip
    lines = [head]
    for node in refs.off_nodes[:MAX_OFF_NODES]:
        holders = ", ".join(node.requests) or "no live lease"
        lines.append(Text.assemble(
            ("  off ", "red"), f"#{node.node_id}", ("  recorded ", "dim"), str(node.recorded),
            (" derived ", "dim"), str(node.derived),
            ("  Δ ", "dim"), (fmt.signed(node.delta), "bold red"),
            (f"  {node.tokens:,} tok  ", "dim"), holders,
        ))  # fmt: skip
    if len(refs.off_nodes) > MAX_OFF_NODES:
        lines.append(Text(f"  … {len(refs.off_nodes) - MAX_OFF_NODES} more nodes off", style="red"))
    return lines


class RefCheck(SnapshotStatic):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._per_node: RefReconciliation | None = None
        self._per_node_step: int | None = None

    def layout_key(self, snapshot: Snapshot):
        refs = snapshot.refs if snapshot.refs.per_node else self._per_node
        return (snapshot.info.engine, refs is None, len(refs.off_nodes) if refs else 0)

    def render_snapshot(self, snapshot: Snapshot) -> Group | Text:
        refs = snapshot.refs
        if refs.leases is None and refs.nodes_checked is None:
            return Text.assemble(("delta_ref ", "dim"), (fmt.unobservable(snapshot), "dim"))
        if refs.per_node:
            self._per_node, self._per_node_step = refs, snapshot.counters.steps
        return Group(
            token_level_line(snapshot), *per_node_lines(self._per_node, self._per_node_step)
        )

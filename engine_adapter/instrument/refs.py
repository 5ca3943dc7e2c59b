"""Refcount reconciliation (seed 000 0x04B "Derive refcounts from reachability", 0x0CF).

Recorded side: what SGLang's tree says. Aggregate: `protected_size()` (tokens in nodes with
lock_ref > 0). Per node: the lock_ref each node prints in SGLang's `pretty_print()`
(see tree_dump.py; only when `per_node=True`).

Derived side: the leases kvctl knows are live: every running, prefilling or reloading
request's `TreeLock` and every retention lease held across a tool wait. Locking a node in
SGLang increments lock_ref on the whole root-to-node path (seed 000 0x08D: locks protect
paths), so a node's derived count is the number of leases whose path contains it, read
with SGLang's `collect_path_info`.

    delta_ref(node) = recorded(node) - derived(node)      must be 0 after every step
"""

from __future__ import annotations

from collections.abc import Iterable

from engine_adapter.instrument.tree_dump import dump_nodes
from engine_adapter.snapshot import NodeRefCheck, RefReconciliation

Lease = tuple[str, int]  # (holder: request id or "session:<id>", anchor node id)


def reconcile(tree_cache, leases: Iterable[Lease], *, per_node: bool) -> RefReconciliation:
    """Compare recorded and derived lock counts. Reads only; never mutates the tree."""
    leases = list(leases)
    derived: dict[int, int] = {}
    holders: dict[int, list[str]] = {}
    node_tokens: dict[int, int] = {}
    anchors = sorted({node for _, node in leases})
    if anchors:
        paths = tree_cache.tree_core.collect_path_info(anchors)
        path_of = dict(zip(anchors, paths))
        for holder, node in leases:
            for info in path_of[node]:
                derived[info.node_id] = derived.get(info.node_id, 0) + 1
                holders.setdefault(info.node_id, []).append(holder)
                node_tokens[info.node_id] = info.path_end - info.path_start
    derived_tokens = sum(node_tokens[n] for n, count in derived.items() if count > 0)
    recorded_tokens = tree_cache.protected_size()

    off: list[NodeRefCheck] = []
    nodes_checked = None
    if per_node:
        dumped = dump_nodes(tree_cache)
        nodes_checked = len(dumped)
        seen = set()
        for node in dumped:
            seen.add(node.node_id)
            expected = derived.get(node.node_id, 0)
            if node.lock_ref != expected:
                off.append(
                    NodeRefCheck(
                        node_id=node.node_id,
                        recorded=node.lock_ref,
                        derived=expected,
                        tokens=node.key_tokens,
                        requests=tuple(sorted(set(holders.get(node.node_id, ())))),
                    )
                )
        for node_id in derived.keys() - seen:  # a lease on a node the tree no longer has
            off.append(
                NodeRefCheck(
                    node_id=node_id,
                    recorded=0,
                    derived=derived[node_id],
                    tokens=node_tokens[node_id],
                    requests=tuple(sorted(set(holders[node_id]))),
                )
            )
    return RefReconciliation(
        leases=len(leases),
        recorded_protected_tokens=recorded_tokens,
        derived_protected_tokens=derived_tokens,
        nodes_checked=nodes_checked,
        per_node=per_node,
        off_nodes=tuple(sorted(off, key=lambda n: n.node_id)),
    )

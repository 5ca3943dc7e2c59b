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

from typing import NamedTuple

from engine_adapter.instrument.tree_dump import DumpedNode
from engine_adapter.snapshot import NodeRefCheck, RefReconciliation

Lease = tuple[str, int]  # (holder: request id or "session:<id>", anchor node id)


class DerivedRefs(NamedTuple):
    """Lock counts explained by live leases, per node on a leased path."""

    counts: dict[int, int]
    holders: dict[int, list[str]]
    node_tokens: dict[int, int]

    @property
    def protected_tokens(self) -> int:
        return sum(self.node_tokens[n] for n, c in self.counts.items() if c > 0)


def derive(tree_cache, leases: Iterable[Lease]) -> DerivedRefs:
    """Walk each lease's root-to-anchor path with SGLang's `collect_path_info`."""
    leases = list(leases)
    counts: dict[int, int] = {}
    holders: dict[int, list[str]] = {}
    node_tokens: dict[int, int] = {}
    anchors = sorted({node for _, node in leases})
    if anchors:
        path_of = dict(zip(anchors, tree_cache.tree_core.collect_path_info(anchors)))
        for holder, node in leases:
            for info in path_of[node]:
                counts[info.node_id] = counts.get(info.node_id, 0) + 1
                holders.setdefault(info.node_id, []).append(holder)
                node_tokens[info.node_id] = info.path_end - info.path_start
    return DerivedRefs(counts, holders, node_tokens)


def derived_protected_tokens(tree_cache, leases: Iterable[Lease]) -> int:
    """`derive(...).protected_tokens` without the per-node counts and holders: the tokens
    of the distinct nodes on the leased root-to-anchor paths (the token-level check)."""
    anchors = sorted({node for _, node in leases})
    if not anchors:
        return 0
    tokens: dict[int, int] = {}
    for path in tree_cache.tree_core.collect_path_info(anchors):
        for info in path:
            tokens[info.node_id] = info.path_end - info.path_start
    return sum(tokens.values())


def reconcile(tree_cache, leases: Iterable[Lease], dumped: list[DumpedNode] | None) -> RefReconciliation:
    """Compare recorded and derived lock counts; per node only when `dumped` (SGLang's
    per-node printout, see tree_dump.py) is given. Reads only; never mutates the tree."""
    leases = list(leases)
    off: list[NodeRefCheck] = []
    if dumped is None:
        return RefReconciliation(
            leases=len(leases),
            recorded_protected_tokens=tree_cache.protected_size(),
            derived_protected_tokens=derived_protected_tokens(tree_cache, leases),
            nodes_checked=None, per_node=False, off_nodes=(),
        )
    derived = derive(tree_cache, leases)
    if dumped is not None:
        seen = set()
        for node in dumped:
            seen.add(node.node_id)
            expected = derived.counts.get(node.node_id, 0)
            if node.lock_ref != expected:
                off.append(NodeRefCheck(
                    node_id=node.node_id, recorded=node.lock_ref, derived=expected,
                    tokens=node.key_tokens,
                    requests=tuple(sorted(set(derived.holders.get(node.node_id, ())))),
                ))
        for node_id in derived.counts.keys() - seen:  # a lease on a node the tree lost
            off.append(NodeRefCheck(
                node_id=node_id, recorded=0, derived=derived.counts[node_id],
                tokens=derived.node_tokens[node_id],
                requests=tuple(sorted(set(derived.holders[node_id]))),
            ))
    return RefReconciliation(
        leases=len(leases),
        recorded_protected_tokens=tree_cache.protected_size(),
        derived_protected_tokens=derived.protected_tokens,
        nodes_checked=None if dumped is None else len(dumped),
        per_node=dumped is not None,
        off_nodes=tuple(sorted(off, key=lambda n: n.node_id)),
    )

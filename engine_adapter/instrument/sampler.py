"""One sampler, two hosts: SGLang's objects plus kvctl's tallies in, one `Snapshot` out.

Both hosts call it between scheduler steps, in the thread that owns the tree:

::

    embedded engine (snapshot_builder.py) --+
                                            +--> SampleInputs --> Sampler.sample() --> Snapshot
    SGLang plugin (plugin/scheduler_host) --+

A host supplies only what it can see: SGLang's `tree_cache` and allocator, the live `Req`s
that hold KV rows outside the tree, the tree locks that explain the recorded lock refs
(`Req.lock`, and for the embedded engine its retention leases), and its own frozen funnel,
counters and request views. Everything is read here with the instrument modules (ledger,
refcount reconciliation, per-node dump); nothing is mutated. A field a host cannot observe
arrives as `None` and stays `None` in the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from engine_adapter.funnel import Funnel
from engine_adapter.instrument.alerts import AlertEvaluator, AlertInputs, AlertThresholds
from engine_adapter.instrument.ledger import read_ledger
from engine_adapter.instrument.refs import Lease, derive, reconcile
from engine_adapter.instrument.tree_dump import DumpedNode, dump_nodes
from engine_adapter.snapshot import (
    Counters,
    EngineInfo,
    HiCacheIO,
    HostLedger,
    MappingLag,
    PoolLedger,
    RefReconciliation,
    RequestView,
    Snapshot,
    TreeNodes,
    TreeStats,
)
from engine_adapter.base.pages import ceil_div


class SampleInputs(NamedTuple):
    """What a host hands the sampler at one step boundary.

    live_reqs: every SGLang `Req` holding KV rows outside the tree (private slots).
    leases: (holder, anchor node id) for every live tree lock the host knows about.
    labels: holder -> namespace label, to name the namespace of a node a lease explains.
    """

    tree_cache: Any
    allocator: Any
    live_reqs: Sequence[Any]
    leases: Sequence[Lease]
    labels: Mapping[str, str]
    funnel: Funnel
    counters: Counters
    mapping: MappingLag | None
    requests: tuple[RequestView, ...]
    virtual_time_s: float
    host_tokens: int | None = 0
    host_capacity_tokens: int | None = None
    host: HostLedger | None = None  # SGLang HiCache's host pool (plugin/hicache_reader.py)
    hicache: HiCacheIO | None = None
    whatif: Any = None  # WhatIfCurve from the host's what-if shadow; None: not observable


class Sampler:
    """Turns `SampleInputs` into consecutive `Snapshot`s (numbered from 1).

    Keeps only the sequence number and the alert evaluator's previous reading (alerts are
    judged on consecutive samples); reads SGLang's objects, never writes them."""

    def __init__(self, info: EngineInfo, thresholds: AlertThresholds | None = None) -> None:
        self.info = info
        self.alerts = AlertEvaluator(thresholds or AlertThresholds())
        self._seq = 0

    def sample(self, inputs: SampleInputs, *, per_node_refs: bool, wall_s: float,
               notes: tuple[str, ...] = (), reconcile_refs: bool = True) -> Snapshot:
        """One consistent read. per_node_refs: also read SGLang's per-node lock refs (a full
        tree walk, see tree_dump.py); otherwise the reconciliation is token level only.
        reconcile_refs=False skips the derived side (a path walk per lease): the recorded
        protected size stays, derived and the lease count read as not observed (None)."""
        tree = inputs.tree_cache
        ledger = read_ledger(inputs.allocator, tree, inputs.live_reqs,
                             host_tokens=inputs.host_tokens,
                             host_capacity_tokens=inputs.host_capacity_tokens,
                             host=inputs.host)
        dumped = dump_nodes(tree) if per_node_refs else None
        if reconcile_refs or dumped is not None:
            refs = reconcile(tree, inputs.leases, dumped)
        else:
            refs = RefReconciliation(leases=None, recorded_protected_tokens=tree.protected_size(),
                                     derived_protected_tokens=None, nodes_checked=None,
                                     per_node=False)
        alerts = self.alerts.evaluate(AlertInputs(
            ledger=ledger, counters=inputs.counters, funnel=inputs.funnel, refs=refs,
            mapping=inputs.mapping,
        ))
        self._seq += 1
        return Snapshot(
            seq=self._seq,
            virtual_time_s=inputs.virtual_time_s,
            wall_time_s=wall_s,
            info=self.info,
            ledger=ledger,
            funnel=inputs.funnel,
            refs=refs,
            mapping=inputs.mapping,
            counters=inputs.counters,
            tree=tree_stats(dumped, ledger),
            alerts=alerts,
            requests=inputs.requests,
            tree_nodes=tree_nodes(tree, dumped, inputs.leases, inputs.labels, ledger.page_size),
            notes=notes,
            hicache=inputs.hicache,
            whatif=inputs.whatif,
        )


def tree_stats(dumped: list[DumpedNode] | None, ledger: PoolLedger) -> TreeStats:
    """Shape of the tree: sizes from the ledger, node counts only from a per-node read."""
    cached = ledger.evictable_tokens + ledger.protected_tokens
    by_medium = (("device", cached),)
    if ledger.host_tokens is not None:
        by_medium += (("host", ledger.host_tokens),)
    if dumped is None:
        return TreeStats(nodes=None, cached_tokens=cached, tokens_by_medium=by_medium)
    parents = {n.parent_id for n in dumped}
    depth_tokens: dict[int, int] = {}
    for node in dumped:  # depth-first order: a parent precedes its children
        depth_tokens[node.node_id] = depth_tokens.get(node.parent_id, 0) + node.key_tokens
    return TreeStats(
        nodes=len(dumped), cached_tokens=cached,
        max_depth_tokens=max(depth_tokens.values(), default=0),
        leaves=sum(1 for n in dumped if n.node_id not in parents),
        tokens_by_medium=by_medium,
    )


def tree_nodes(tree_cache: Any, dumped: list[DumpedNode] | None, leases: Sequence[Lease],
               labels: Mapping[str, str], page_size: int) -> TreeNodes:
    """The per-node read by column (engine_adapter/tree_nodes.py), built in one pass."""
    if dumped is None:
        return TreeNodes.of(())
    derived = derive(tree_cache, leases)
    holders_col, namespace_col, derived_col = [], [], []
    for node in dumped:
        holders = tuple(sorted(set(derived.holders.get(node.node_id, ()))))
        names = {labels[h] for h in holders if h in labels}
        holders_col.append(holders)
        namespace_col.append(names.pop() if len(names) == 1 else None)
        derived_col.append(derived.counts.get(node.node_id, 0))
    return TreeNodes(
        node_id=[n.node_id for n in dumped], parent_id=[n.parent_id for n in dumped],
        depth=[n.depth for n in dumped], tokens=[n.key_tokens for n in dumped],
        pages=[ceil_div(n.key_tokens, page_size) for n in dumped],
        recorded_lock_ref=[n.lock_ref for n in dumped], derived_lock_ref=derived_col,
        holders=holders_col, namespace=namespace_col,
    )

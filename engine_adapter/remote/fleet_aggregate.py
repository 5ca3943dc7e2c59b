"""Sum several workers' snapshots into one fleet snapshot (pure).

Connected workers are summed field by field (pool ledger, counters, funnel, tree); a
quantity that is None on any worker stays None in the sum. Disconnected workers add a
`fleet_worker_down` alert and nothing else. Workers' own alerts are kept, their evidence
prefixed with the worker URL. Each worker also stays in the sum as a `ReplicaView`
(engine_adapter/fleet_view.py): its own ledger and hit rate, or down with no figures.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Sequence

from engine_adapter.fleet_view import ReplicaView, RouterView
from engine_adapter.funnel import Funnel, FunnelStage, PrefixLengths, Rejection
from engine_adapter.snapshot import (
    Alert,
    Counters,
    EngineInfo,
    PoolLedger,
    RefReconciliation,
    Snapshot,
    TreeStats,
)


def aggregate(workers: Sequence[tuple[str, Snapshot]], *, seq: int, wall_time_s: float,
              loads: Sequence[int | None] = (), router: RouterView | None = None) -> Snapshot:
    """The fleet view of `(url, snapshot)` pairs; the first worker's snapshot shapes it.
    `loads[i]`: worker i's running + queued requests (None: unknown); `router`: the
    router's own figures, carried as they are."""
    if not workers:
        raise ValueError("a fleet needs at least one worker")
    loads = list(loads) + [None] * (len(workers) - len(loads))
    replicas = tuple(replica_view(url, s, load)
                     for (url, s), load in zip(workers, loads, strict=True))
    live = [s for _, s in workers if s.connected]
    alerts = [
        dataclasses.replace(a, evidence=f"{url}: {a.evidence}")
        for url, s in workers
        for a in s.alerts
        if s.connected
    ]
    alerts += [
        Alert(name="fleet_worker_down", severity="critical", evidence=f"{url}: not connected")
        for url, s in workers
        if not s.connected
    ]
    base = live[0] if live else workers[0][1]
    notes = (f"fleet: {len(workers)} workers, {len(live)} connected",)
    if not live:
        return dataclasses.replace(
            base, seq=seq, wall_time_s=wall_time_s, connected=False,
            alerts=tuple(alerts), notes=notes, replicas=replicas, router=router,
        )  # fmt: skip
    page_sizes = {s.info.page_size for s in live}
    page_size = next(iter(page_sizes)) if len(page_sizes) == 1 else 1
    if len(page_sizes) > 1:
        notes += ("page sizes differ across workers: aggregate pages are tokens",)
    return Snapshot(
        seq=seq,
        virtual_time_s=max(s.virtual_time_s for s in live),
        wall_time_s=wall_time_s,
        info=_info(live, page_size),
        ledger=_ledger(live, page_size),
        funnel=_funnel(live),
        refs=_refs(live),
        mapping=base.mapping,
        counters=Counters(
            **{
                f.name: _opt_sum(getattr(s.counters, f.name) for s in live)
                for f in dataclasses.fields(Counters)
            }
        ),  # fmt: skip
        tree=_tree(live),
        alerts=tuple(alerts),
        connected=True,
        notes=notes + base.notes[-5:],
        replicas=replicas,
        router=router,
    )


def replica_view(url: str, snapshot: Snapshot, load: int | None = None) -> ReplicaView:
    """One worker beside the sum: its figures, or none at all when it is down (its
    snapshot's numbers are then placeholders or stale, never a reading)."""
    if not snapshot.connected:
        return ReplicaView(url=url, connected=False)
    c = snapshot.counters
    return ReplicaView(url=url, connected=True, ledger=snapshot.ledger,
                       hit_rate=snapshot.hit_rate, requests_finished=c.requests_finished,
                       prompt_tokens=c.prompt_tokens, hit_tokens=c.hit_tokens, load=load)


def _same(values: Sequence[str]) -> str:
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else "mixed"


def _info(live: Sequence[Snapshot], page_size: int) -> EngineInfo:
    return EngineInfo(
        engine="remote",
        tree_core="remote",
        page_size=page_size,
        eviction_policy=_same([s.info.eviction_policy for s in live]),
        pool_tokens=sum(s.info.pool_tokens for s in live),
        kv_pool="remote",
        sglang_version=_same([s.info.sglang_version for s in live]),
        model=_same([s.info.model for s in live]),
    )


def _opt_sum(values) -> int | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _ledger(live: Sequence[Snapshot], page_size: int) -> PoolLedger:
    ledgers = [s.ledger for s in live]
    return PoolLedger(
        page_size=page_size,
        pool_tokens=sum(x.pool_tokens for x in ledgers),
        free_tokens=sum(x.free_tokens for x in ledgers),
        evictable_tokens=sum(x.evictable_tokens for x in ledgers),
        used_tokens=sum(x.used_tokens for x in ledgers),
        protected_tokens=_opt_sum(x.protected_tokens for x in ledgers),
        private_tokens=_opt_sum(x.private_tokens for x in ledgers),
        private_filled_tokens=_opt_sum(x.private_filled_tokens for x in ledgers),
        host_tokens=sum(x.host_tokens for x in ledgers),
        host_capacity_tokens=_opt_sum(x.host_capacity_tokens for x in ledgers),
    )


def _funnel(live: Sequence[Snapshot]) -> Funnel:
    funnels = [s.funnel for s in live]
    stages = tuple(
        FunnelStage(
            name=group[0].name,
            requests=_opt_sum(st.requests for st in group),
            tokens=_opt_sum(st.tokens for st in group),
        )
        for group in zip(*(f.stages for f in funnels), strict=True)
    )
    rejections = tuple(
        Rejection(
            reason=group[0].reason,
            requests=_opt_sum(r.requests for r in group),
            tokens=_opt_sum(r.tokens for r in group),
        )
        for group in zip(*(f.rejections for f in funnels), strict=True)
    )
    lengths = PrefixLengths(
        prompt=sum(f.lengths.prompt for f in funnels),
        semantic=_opt_sum(f.lengths.semantic for f in funnels),
        indexed=_opt_sum(f.lengths.indexed for f in funnels),
        cap=sum(f.lengths.cap for f in funnels),
        runtime=sum(f.lengths.runtime for f in funnels),
    )
    return Funnel(stages=stages, rejections=rejections, lengths=lengths)


def _refs(live: Sequence[Snapshot]) -> RefReconciliation:
    """Summed over workers; None unless every worker observes it (a kvctl plugin on each).
    Off nodes keep their worker's node ids (ids are per tree, not fleet-wide)."""
    refs = [s.refs for s in live]
    return RefReconciliation(
        leases=_opt_sum(r.leases for r in refs),
        recorded_protected_tokens=_opt_sum(r.recorded_protected_tokens for r in refs),
        derived_protected_tokens=_opt_sum(r.derived_protected_tokens for r in refs),
        nodes_checked=_opt_sum(r.nodes_checked for r in refs),
        per_node=all(r.per_node for r in refs),
        off_nodes=tuple(node for r in refs for node in r.off_nodes),
    )


def _tree(live: Sequence[Snapshot]) -> TreeStats:
    media: Counter[str] = Counter()
    for s in live:
        media.update(dict(s.tree.tokens_by_medium))
    depths = [s.tree.max_depth_tokens for s in live]
    return TreeStats(
        nodes=_opt_sum(s.tree.nodes for s in live),
        cached_tokens=_opt_sum(s.tree.cached_tokens for s in live),
        max_depth_tokens=None if None in depths else max(depths),
        leaves=_opt_sum(s.tree.leaves for s in live),
        tokens_by_medium=tuple(sorted(media.items())),
    )

"""Assemble an immutable `Snapshot` from the embedded engine's state, and judge it.

Reads only. The ledger, the refcount reconciliation and the funnel come from the
instrument modules; this file wires them and lists the invariants `check_integrity`
enforces after every step.
"""

from __future__ import annotations

from engine_adapter.embedded.state import EngineState
from engine_adapter.instrument.alerts import AlertEvaluator, AlertInputs, AlertThresholds
from engine_adapter.instrument.ledger import read_ledger
from engine_adapter.instrument.refs import derive, reconcile
from engine_adapter.instrument.tree_dump import dump_nodes
from engine_adapter.snapshot import EngineInfo, MappingLag, RequestView, Snapshot, TreeNodes, TreeStats

MAX_REQUEST_VIEWS = 500


class SnapshotBuilder:
    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention
        self._seq = 0
        tau = st.config.tau_high if st.config.tau_high is not None else 0.88
        self.alerts = AlertEvaluator(AlertThresholds(tau_high=tau))
        self.info = EngineInfo(
            engine="embedded",
            tree_core=st.config.tree_core,
            page_size=st.config.page_size,
            eviction_policy=st.config.eviction_policy,
            pool_tokens=st.config.pool_tokens,
            kv_pool="MHATokenToKVPool" if st.config.kv_pool == "mha" else "NoOpMHATokenToKVPool",
            sglang_version=st.sg.sglang_version,
            model=st.config.cost.model_name,
            bytes_per_token=st.config.cost.kv_bytes_per_token,
        )

    def leases(self) -> list[tuple[str, int]]:
        """Every live lock kvctl knows about: request locks and retention leases."""
        st = self.st
        held = [(t.req.rid, t.req.lock.node) for t in st.live_tracked() if t.req.lock is not None]
        held += [(f"session:{s}", lease.node_id) for s, lease in st.leases.items()]
        return held

    def build(self, *, per_node_refs: bool, wall_s: float, requests: bool = True) -> Snapshot:
        st = self.st
        sg = st.sg
        live = st.live_tracked()
        ledger = read_ledger(
            sg.allocator, sg.tree_cache, [t.req for t in live],
            host_tokens=self.retention.host_tokens,
            host_capacity_tokens=st.config.host_capacity_tokens,
        )
        leases = self.leases()
        dumped = dump_nodes(sg.tree_cache) if per_node_refs else None
        refs = reconcile(sg.tree_cache, leases, dumped)
        funnel = st.funnel.freeze()
        mapping = self._mapping()
        counters = st.counters
        counters.prompt_tokens = funnel.prompt_tokens
        counters.hit_tokens = funnel.hit_tokens
        counters.recomputed_tokens = funnel.recomputed_tokens
        frozen = counters.freeze()
        alerts = self.alerts.evaluate(
            AlertInputs(ledger=ledger, counters=frozen, funnel=funnel, refs=refs, mapping=mapping)
        )
        self._seq += 1
        return Snapshot(
            seq=self._seq,
            virtual_time_s=st.clock_s,
            wall_time_s=wall_s,
            info=self.info,
            ledger=ledger,
            funnel=funnel,
            refs=refs,
            mapping=mapping,
            counters=frozen,
            tree=self._tree_stats(dumped, ledger),
            alerts=alerts,
            requests=self._request_views() if requests else (),
            tree_nodes=self._tree_nodes(dumped, leases),
        )

    def _tree_stats(self, dumped, ledger) -> TreeStats:
        cached = ledger.evictable_tokens + ledger.protected_tokens
        if dumped is None:
            return TreeStats(nodes=None, cached_tokens=cached,
                             tokens_by_medium=(("device", cached), ("host", ledger.host_tokens)))
        parents = {n.parent_id for n in dumped}
        depth_tokens: dict[int, int] = {}
        for node in dumped:  # depth-first order: a parent precedes its children
            depth_tokens[node.node_id] = depth_tokens.get(node.parent_id, 0) + node.key_tokens
        return TreeStats(
            nodes=len(dumped), cached_tokens=cached,
            max_depth_tokens=max(depth_tokens.values(), default=0),
            leaves=sum(1 for n in dumped if n.node_id not in parents),
            tokens_by_medium=(("device", cached), ("host", ledger.host_tokens)),
        )

    def _tree_nodes(self, dumped, leases) -> TreeNodes:
        """The per-node read by column (engine_adapter/tree_nodes.py), built in one pass."""
        if dumped is None:
            return TreeNodes.of(())
        derived = derive(self.st.sg.tree_cache, leases)
        label_of = {t.req.rid: t.namespace_label for t in self.st.live_tracked()}
        page = self.st.config.page_size
        holders_col, namespace_col, derived_col = [], [], []
        for node in dumped:
            holders = tuple(sorted(set(derived.holders.get(node.node_id, ()))))
            labels = {label_of[h] for h in holders if h in label_of}
            holders_col.append(holders)
            namespace_col.append(labels.pop() if len(labels) == 1 else None)
            derived_col.append(derived.counts.get(node.node_id, 0))
        return TreeNodes(
            node_id=[n.node_id for n in dumped], parent_id=[n.parent_id for n in dumped],
            depth=[n.depth for n in dumped], tokens=[n.key_tokens for n in dumped],
            pages=[-(-n.key_tokens // page) for n in dumped],
            recorded_lock_ref=[n.lock_ref for n in dumped], derived_lock_ref=derived_col,
            holders=holders_col, namespace=namespace_col,
        )

    def _mapping(self) -> MappingLag:
        st = self.st
        lag = 0
        oldest = 0.0
        for tr in st.reloading:
            duration = max(tr.reload_ready_s - tr.reload_start_s, 1e-12)
            done = min(1.0, max(0.0, (st.clock_s - tr.reload_start_s) / duration))
            lag += tr.reload_tokens - int(tr.reload_tokens * done)  # L_map = required - ready
            oldest = max(oldest, st.clock_s - tr.reload_start_s)
        return MappingLag(
            waiting_requests=len(st.reloading),
            lag_tokens=lag,
            max_wait_seconds=oldest,
            stalls_total=st.counters.mapping_stalls,
            stall_seconds_total=st.counters.mapping_stall_seconds,
        )

    def _request_views(self) -> tuple[RequestView, ...]:
        st = self.st
        views = []
        groups = (("running", st.running.values()), ("prefill", st.partial),
                  ("reloading", st.reloading), ("waiting", st.waiting))
        for state, group in groups:
            for tr in group:
                if len(views) >= MAX_REQUEST_VIEWS:
                    break
                req = tr.req
                views.append(RequestView(
                    rid=req.rid, state=state, namespace=tr.namespace_label,
                    prompt_tokens=len(tr.spec.tokens), output_tokens=len(req.output_ids),
                    prefix_hit_tokens=tr.hit_tokens, retention=tr.spec.retention,
                    lease_node=req.lock.node if req.lock is not None else None,
                ))
        for session, lease in st.leases.items():
            if len(views) >= MAX_REQUEST_VIEWS:
                break
            views.append(RequestView(rid=f"session:{session}", state="retained", namespace="",
                                     prompt_tokens=lease.tokens, output_tokens=0,
                                     prefix_hit_tokens=0, retention="retain", lease_node=lease.node_id))
        for session, entry in self.retention.host.items():
            if len(views) >= MAX_REQUEST_VIEWS:
                break
            views.append(RequestView(rid=f"session:{session}", state="offloaded", namespace=entry.key[0],
                                     prompt_tokens=entry.length, output_tokens=0,
                                     prefix_hit_tokens=0, retention="offload"))
        return tuple(views)

    def violations(self, snap: Snapshot) -> list[str]:
        """Every invariant the snapshot breaks, each with its numbers."""
        problems = []
        led = snap.ledger
        if led.residual_tokens != 0:
            problems.append(
                f"pool ledger residual {led.residual_tokens} tokens: pool {led.pool_tokens} != "
                f"free {led.free_tokens} + evictable {led.evictable_tokens} + protected "
                f"{led.protected_tokens} + private {led.private_tokens}"
            )
        refs = snap.refs
        if refs.delta_protected_tokens:
            problems.append(
                f"protected tokens recorded {refs.recorded_protected_tokens} != derived "
                f"{refs.derived_protected_tokens} from {refs.leases} leases"
            )
        for node in refs.off_nodes[:5]:
            holders = ", ".join(node.requests) or "no lease"
            problems.append(f"delta_ref {node.delta:+d} at node {node.node_id} "
                            f"(recorded {node.recorded}, derived {node.derived}; {holders})")
        if not snap.funnel.is_monotone():
            problems.append("prefix funnel is not monotone")
        lengths = snap.funnel.lengths
        if lengths.runtime > (lengths.semantic or 0):
            problems.append(f"reused {lengths.runtime} tokens but only {lengths.semantic} were "
                            "semantically reusable (cross-namespace or stale-generation hit)")
        if not self.st.live_tracked() and not self.st.leases:
            try:
                self.st.sg.tree_cache.sanity_check()
            except Exception as err:  # SGLang's own assertion, reported with its message
                problems.append(f"SGLang sanity_check failed: {err}")
        return problems

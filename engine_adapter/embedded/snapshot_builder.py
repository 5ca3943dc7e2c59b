"""The embedded engine as one host of the shared sampler (instrument/sampler.py), and the
invariants `check_integrity` enforces after every step.

Reads only. This file gathers what only the embedded engine knows (its queues, retention
leases, host tier, virtual clock, funnel and counters) into `SampleInputs`; the sampler
reads SGLang's objects and builds the `Snapshot`, exactly as it does inside a real
SGLang scheduler (engine_adapter/plugin/).
"""

from __future__ import annotations

from engine_adapter.embedded.state import EngineState
from engine_adapter.instrument.alerts import AlertThresholds
from engine_adapter.instrument.sampler import SampleInputs, Sampler
from engine_adapter.snapshot import EngineInfo, MappingLag, RequestView, Snapshot

MAX_REQUEST_VIEWS = 500


class SnapshotBuilder:
    def __init__(self, st: EngineState, retention) -> None:
        self.st = st
        self.retention = retention
        tau = st.config.tau_high if st.config.tau_high is not None else 0.88
        self.sampler = Sampler(EngineInfo(
            engine="embedded",
            tree_core=st.config.tree_core,
            page_size=st.config.page_size,
            eviction_policy=st.config.eviction_policy,
            pool_tokens=st.config.pool_tokens,
            kv_pool="MHATokenToKVPool" if st.config.kv_pool == "mha" else "NoOpMHATokenToKVPool",
            sglang_version=st.sg.sglang_version,
            model=st.config.cost.model_name,
            bytes_per_token=st.config.cost.kv_bytes_per_token,
        ), AlertThresholds(tau_high=tau))

    @property
    def info(self) -> EngineInfo:
        return self.sampler.info

    def leases(self) -> list[tuple[str, int]]:
        """Every live lock kvctl knows about: request locks and retention leases."""
        st = self.st
        held = [(t.req.rid, t.req.lock.node) for t in st.live_tracked() if t.req.lock is not None]
        held += [(f"session:{s}", lease.node_id) for s, lease in st.leases.items()]
        if st.hicache is not None:  # SGLang's HiCache transfers hold tree locks too
            held += st.hicache.transfer_leases()
        return held

    def inputs(self, *, requests: bool = True, leases: bool = True) -> SampleInputs:
        """What the sampler needs from this engine at the current step boundary
        (leases=False: no lease list, for a sample that does not reconcile refs)."""
        st = self.st
        live = st.live_tracked()
        funnel = st.funnel.freeze()
        counters = st.counters
        counters.prompt_tokens = funnel.prompt_tokens
        counters.hit_tokens = funnel.hit_tokens
        counters.recomputed_tokens = funnel.recomputed_tokens
        return SampleInputs(
            tree_cache=st.sg.tree_cache,
            allocator=st.sg.allocator,
            live_reqs=[t.req for t in live],
            leases=self.leases() if leases else (),
            labels={t.req.rid: t.namespace_label for t in live},
            funnel=funnel,
            counters=counters.freeze(),
            mapping=self._mapping(),
            requests=self._request_views() if requests else (),
            virtual_time_s=st.clock_s,
            host_tokens=self.retention.host_tokens,
            host_capacity_tokens=st.config.host_capacity_tokens,
            whatif=st.whatif.curve() if st.whatif is not None else None,
        )

    def build(self, *, per_node_refs: bool, wall_s: float, requests: bool = True,
              reconcile_refs: bool = True) -> Snapshot:
        full = reconcile_refs or per_node_refs
        snap = self.sampler.sample(self.inputs(requests=requests, leases=full),
                                   per_node_refs=per_node_refs, wall_s=wall_s,
                                   reconcile_refs=full)
        if self.st.hicache is not None:  # SGLang's host tier, as the plugin reads it
            snap = self.st.hicache.complete(snap, per_node=snap.tree_nodes is not None)
        return snap

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
                req = tr.req if tr.built else None  # a snapshot builds no Req
                views.append(RequestView(
                    rid=tr.spec.rid, state=state, namespace=tr.namespace_label,
                    prompt_tokens=len(tr.spec.tokens),
                    output_tokens=len(req.output_ids) if req is not None else 0,
                    prefix_hit_tokens=tr.hit_tokens, retention=tr.spec.retention,
                    lease_node=req.lock.node if req is not None and req.lock is not None else None,
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

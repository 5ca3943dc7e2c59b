"""Retention leases: the lock kvctl holds on a finished turn's path ("retain", seed 003 §6).

A lease pins the turn's whole cached path (prompt and output, as published) in HBM while
its session waits on a tool: SGLang's tree cannot evict a locked node, so the next turn
finds it all resident. One lease per session; the next turn's own match lock replaces it
at admission. Under pressure the oldest lease is revoked first (a paused session yields
to running work); its path then becomes evictable like any "drop".

    session turn k finishes ──take──> lease(lock on path) ──release──> next turn admitted
                                            │
                                            └──revoke_oldest──> path evictable (receipt)
"""

from __future__ import annotations

from engine_adapter.embedded.requests import Tracked
from engine_adapter.embedded.state import EngineState, RetentionLease


class Leases:
    """Takes, releases and revokes retention leases.

    Mutates `st.leases` (session -> RetentionLease) and the lock refs of SGLang's tree
    (`lock` / `unlock`: protected <-> evictable tokens); a revocation also records an
    eviction receipt. Raises nothing of its own."""

    def __init__(self, st: EngineState) -> None:
        self.st = st

    def take(self, tr: Tracked) -> None:
        """Lock the path a finished (already published) request left in the tree, under
        its key, replacing the session's previous lease."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        st, req = self.st, tr.req
        tree = st.sg.tree_cache
        match = tree.match_prefix(
            MatchPrefixParams(
                key=RadixKey(token_ids=req.full_untruncated_fill_ids, extra_key=req.extra_key,
                             cache_salt=req.cache_salt)
            )
        )
        old = st.leases.pop(tr.spec.session, None)
        if old is not None:
            tree.unlock(old.lock)
        lock = tree.lock(match.last_device_node)
        st.leases[tr.spec.session] = RetentionLease(
            session=tr.spec.session, lock=lock, node_id=match.last_device_node,
            tokens=match.device_prefix_len, since_s=st.clock_s,
        )

    def release(self, session: str) -> bool:
        """The session's next turn holds its own lock now: drop its lease, if any.
        Returns whether there was one."""
        lease = self.st.leases.pop(session, None)
        if lease is None:
            return False
        self.st.sg.tree_cache.unlock(lease.lock)
        return True

    def revoke_oldest(self) -> bool:
        """Demote the oldest retained path to evictable; False when no lease is held."""
        st = self.st
        if not st.leases:
            return False
        session = min(st.leases, key=lambda s: st.leases[s].since_s)
        lease = st.leases.pop(session)
        st.sg.tree_cache.unlock(lease.lock)
        st.receipt(kind="eviction", start_s=st.clock_s, end_s=st.clock_s, tokens=lease.tokens,
                   outcome="lease_revoked")
        return True

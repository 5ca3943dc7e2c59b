"""Feeds the embedded engine's what-if shadow (engine_adapter/instrument/whatif.py) from the
cache's own events, once per engine step, in SGLang's order within the step:

    1. admissions   every prefill member seen for the first time: its prompt (from Mooncake
                    block ids when it has them), its tree namespace (cache salt and the
                    generation key: SGLang's tree never shares across them; a read the
                    tenant may not make is no lookup), the pool's private tokens at the previous step's end
                    (what the match saw), and for a turn reloading from the host tier its
                    reload span (host_tokens: the host tier returns it at every scale)
    2. leases       a retained turn whose lease was released or revoked: unlocked
    3. inserts      every member not reloading: its prefilled tokens now in the tree
                    (checkpoint_kv_cache: `cache_protected_len`)
    4. finishes     the step's finished requests; a turn whose session took a retention
                    lease stays pinned until step 2 sees the lease go

The hit SGLang gave each request (the trust check) comes from the funnel record, when it is
final (at its prefill, or when its host-tier reload completes).
"""

from __future__ import annotations

from engine_adapter.embedded.requests import RequestState
from engine_adapter.instrument.whatif import WhatIfShadow, fitted_rate

_WHATIF_SALT = 0x6B7663746C5F7769  # fixed per kvctl version


class WhatIfFeed:
    """Turns one engine step into shadow events. Holds the rids admitted and not finished,
    and the leases it saw (session -> (lease, rid)): both bounded by the live requests and
    sessions."""

    def __init__(self, st, shadow: WhatIfShadow) -> None:
        self.st, self.shadow = st, shadow
        self.admitted: set = set()
        self.leased: dict = {}
        self.reserved = 0

    def private_tokens(self) -> int:
        """Token slots running requests hold outside the tree (ledger.py's private term)."""
        sg = self.st.sg
        tree = sg.tree_cache
        return max(int(sg.allocator.size - sg.allocator.available_size()
                       - tree.evictable_size() - tree.protected_size()), 0)

    def flush_cache(self) -> None:
        """The engine's flush_cache (a scenario event or the operator)."""
        self.shadow.flush_cache()

    def after_step(self, batch) -> None:
        st, shadow = self.st, self.shadow
        members = batch.plan.members if batch.kind == "prefill" and batch.plan.allocated else ()
        for tr in members:
            rid = tr.req.rid
            if rid in self.admitted:
                continue
            self.admitted.add(rid)
            host = tr.reload_required_end if tr.state == RequestState.RELOADING else 0
            req = tr.req  # SGLang's tree keys by (extra_key: the generation, cache_salt)
            shadow.admit(rid, req.origin_input_ids, block_ids=tr.spec.block_ids,
                         namespace=f"{req.cache_salt}/{req.extra_key}",
                         reserved_tokens=self.reserved, host_tokens=host or 0,
                         lookup=tr.facts.authorized)
        reserved = self.reserved = self.private_tokens()
        for session, (lease, rid) in list(self.leased.items()):
            if st.leases.get(session) is not lease:
                del self.leased[session]
                shadow.unlock(rid, reserved_tokens=reserved)
        for tr in members:
            if tr.state in (RequestState.PREFILL, RequestState.RUNNING):
                shadow.insert(tr.req.rid, tr.req.kv.cache_protected_len,
                              reserved_tokens=reserved)
        for record in st.finished:
            self.admitted.discard(record.rid)
            lease = st.leases.get(record.session) if record.session is not None else None
            retain = lease is not None and self.leased.get(record.session, (None,))[0] is not lease
            if retain:
                self.leased[record.session] = (lease, record.rid)
            shadow.release(record.rid, prompt_tokens=record.prompt_tokens,
                           output_tokens=len(record.output_ids), output_ids=record.output_ids,
                           reserved_tokens=reserved,
                           retain=retain)


def attach_whatif(st) -> WhatIfShadow:
    """Create the shadow for `st`'s pool, its step feed (`st.whatif_feed`, called by the
    engine after each step) and the funnel observer giving the measured hits."""
    config = st.config
    # Salted from the engine's seed: a run is reproducible for a seed (the keys never
    # leave the process either way)
    rate = fitted_rate(config.whatif_rate, pool_tokens=config.pool_tokens,
                       page_size=config.page_size)  # the configured rate is a floor
    shadow = WhatIfShadow(pool_tokens=config.pool_tokens, page_size=config.page_size,
                          rate=rate, seed=_WHATIF_SALT ^ config.seed)

    def measured(tracked) -> None:
        shadow.record_measured(tracked.facts.s_runtime, len(tracked.req.origin_input_ids))

    st.whatif = shadow
    st.whatif_feed = WhatIfFeed(st, shadow)
    st.funnel.observers.append(measured)
    return shadow

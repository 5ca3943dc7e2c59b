"""What happens to a finished turn's K/V while its session waits on a tool (seed 003 §6).

    retain   the path stays locked (a retention lease) until the session's next turn is
             admitted: it cannot be evicted, and it occupies HBM for the whole wait.
    drop     the path is published unlocked (evictable); an evicted part is recomputed.
    offload  the K/V is copied to the host tier (real bytes with a real KV pool; modeled
             bytes = tokens x m_token), then published unlocked like drop. On the next
             turn, whatever SGLang's eviction reclaimed meanwhile is reloaded from the host
             tier instead of recomputed, when the reload beats recompute (seed 003
             break-even, reload S*m/B vs recompute 2PS/R); the request cannot run until
             the reload is resident (mapping lag, seed 000 0x06).

`Retention` is the turn end (`finish`) and the one object the scheduler pieces talk to;
its three parts each own one kind of memory held on the side:

    leases.py       retained paths (locks on the tree)
    host_tier.py    offloaded turns on the host, and their reloads
    preemption.py   retraction, abort, and freeing side memory under pressure
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from engine_adapter.embedded.host_tier import HostEntry, HostPlan, HostTier
from engine_adapter.embedded.leases import Leases
from engine_adapter.embedded.preemption import Preemption
from engine_adapter.embedded.requests import FinishedRecord, RequestState, Tracked
from engine_adapter.embedded.state import EngineState

__all__ = ["HostEntry", "HostPlan", "Retention"]


class Retention:
    """Ends turns by their session's retention policy, and fronts leases, the host tier
    and preemption for the prefill, decode and snapshot pieces.

    `finish` mutates SGLang's tree, allocator and rows (publishing and releasing the
    request's K/V), `st.running`, `st.by_rid`, `st.finished`, the counters, and per policy
    a lease or a host entry. The delegated methods mutate what their part's docstring says.
    Raises nothing of its own."""

    def __init__(self, st: EngineState) -> None:
        self.st = st
        self.leases = Leases(st)
        self.host_tier = HostTier(st)
        self.preemption = Preemption(st, self.leases)

    # ---- turn end ----------------------------------------------------------------------

    def finish(self, tr: Tracked, *, released: bool = False) -> None:
        """Release a finished request's row the way its session's policy says.

        released: SGLang already freed the row (an aborted decode); only bookkeeping remains.
        """
        from sglang.srt.mem_cache.common import release_kv_cache

        st = self.st
        req, spec = tr.req, tr.spec
        policy = None
        if spec.session is not None and not spec.last_turn:
            policy = spec.retention or st.config.default_retention
        if released:
            policy = None
        else:
            if policy == "offload":
                self.host_tier.offload(tr)
            req.refresh_fill_ids()  # decode tokens reach the fill array only on refresh
            st.oracle.record(tr.key, req.full_untruncated_fill_ids, req.kv.kv_committed_len,
                             known=req.kv.cache_protected_len, chain=tr.chain)
            release_kv_cache(req, st.sg.tree_cache, checkpoint=True)
        if policy == "retain":
            self.leases.take(tr)
        tr.state = RequestState.FINISHED
        st.leave_running(tr)
        st.counters.requests_finished += 1
        outputs = np.frombuffer(req.output_ids, dtype=np.int64).copy()
        st.counters.decode_tokens += len(outputs)
        st.finished.append(
            FinishedRecord(
                rid=req.rid,
                session=spec.session,
                finish_s=st.clock_s,
                output_ids=outputs,
                prompt_tokens=len(spec.tokens),
                hit_tokens=tr.hit_tokens,
                ttft_s=_or_now(tr.first_token_s, st.clock_s) - spec.arrival_s,
                itl_s=np.frombuffer(tr.itl, dtype=np.float64).copy(),
                queue_s=_or_now(tr.admitted_s, st.clock_s) - spec.arrival_s,
            )
        )
        st.by_rid.pop(req.rid, None)

    def on_admit(self, tr: Tracked) -> None:
        """A session's next turn holds its own lock now: drop the retention lease, and the
        host copy unless the turn is reloading from it."""
        session = tr.spec.session
        if session is None:
            return
        self.leases.release(session)
        if tr.state != RequestState.RELOADING:
            self.host_tier.discard(session)

    def abort(self, tr: Tracked) -> None:
        """End a request that cannot continue even alone: free its row unpublished and
        report it finished with the tokens it has (SGLang's out-of-memory abort)."""
        self.preemption.release_aborted(tr)
        self.finish(tr, released=True)

    # ---- the parts, as the scheduler pieces call them ------------------------------------

    @property
    def host(self) -> OrderedDict[str, HostEntry]:
        """Host-tier entries by session, oldest first (read by snapshots and tests)."""
        return self.host_tier.entries

    @property
    def host_tokens(self) -> int:
        return self.host_tier.tokens

    def host_plan(self, tr: Tracked, s_cap: int) -> HostPlan | None:
        """See `HostTier.plan`."""
        return self.host_tier.plan(tr, s_cap)

    def start_reload(self, tr: Tracked, batch: Any, index: int) -> None:
        """See `HostTier.start_reload`."""
        self.host_tier.start_reload(tr, batch, index)

    def complete_reloads(self) -> None:
        """See `HostTier.complete_reloads`."""
        self.host_tier.complete_reloads()

    def revoke_oldest_lease(self) -> bool:
        """See `Leases.revoke_oldest`."""
        return self.leases.revoke_oldest()

    def retract(self, tr: Tracked) -> None:
        """See `Preemption.retract`."""
        self.preemption.retract(tr)

    def make_room(self, fits: Callable[[], bool]) -> bool:
        """See `Preemption.make_room`."""
        return self.preemption.make_room(fits)


def _or_now(time_s: float | None, now: float) -> float:
    return now if time_s is None else time_s

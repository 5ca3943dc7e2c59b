"""A real SGLang `Scheduler` as a host of the shared sampler (instrument/sampler.py).

Reads, in the scheduler's own thread between steps, only attributes SGLang 0.5.23's
`Scheduler` has (verified in sglang/srt/managers/scheduler.py):

    tree_cache, token_to_kv_pool_allocator       the cache and the pool
    running_batch.reqs, last_batch.reqs,          requests that may own KV rows; the same set
    cur_batch_for_debug.reqs, chunked_req         SGLang's invariant checker uses
                                                  (`_requests_owning_rows`), plus the batch
                                                  being processed (a prefill batch is merged
                                                  into running_batch only next step)
    waiting_queue                                 queued requests (a retracted one may hold rows)
    tree_cache.session_records()                  KV a streaming session holds between turns

Private slots are SGLang's own `kv_private_tokens` formula (instrument/ledger.py); a request
running on a session's record does not own that row, as in SGLang's checker. Leases are the
requests' `Req.lock` TreeLocks. What a scheduler cannot know stays None: the host tier's
load-back lag (mapping), kvctl's retention leases (there are none in a real server).
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from engine_adapter.instrument.sampler import SampleInputs
from engine_adapter.plugin.tally import StepTally
from engine_adapter.snapshot import RequestView

MAX_REQUEST_VIEWS = 500
_LABEL = "_kvctl_namespace"


class _SessionHeld(NamedTuple):
    """A session's KV record, shaped like a `Req` for the ledger (`.kv` only)."""

    kv: Any


def namespace_label(req: Any, salt: str) -> str:
    """Salted, low-cardinality label of the tree namespace `(extra_key, cache_salt)` a request
    reads (SGLang's RadixKey namespacing); never the raw strings (seed 000 0x0CE). Hashed
    once per request (kept on the Req: a request's namespace never changes)."""
    label = getattr(req, _LABEL, None)
    if label is None:
        extra, cache_salt = getattr(req, "extra_key", None), getattr(req, "cache_salt", None)
        if extra is None and cache_salt is None:
            label = "default"
        else:
            raw = f"{salt}\0{extra or ''}\0{cache_salt or ''}"
            label = "ns-" + hashlib.sha256(raw.encode()).hexdigest()[:12]
        setattr(req, _LABEL, label)
    return label


class SchedulerHost:
    """Gathers `SampleInputs` from a scheduler-shaped object; reads, never writes."""

    def __init__(self, scheduler: Any, *, salt: str) -> None:
        self.scheduler = scheduler
        self.salt = salt

    def owning_reqs(self, batch: Any = None) -> list[Any]:
        """Every request that holds KV rows of its own, once each."""
        s = self.scheduler
        candidates: list[Any] = []
        for holder in (batch, s.last_batch, s.cur_batch_for_debug, s.running_batch):
            if holder is not None:
                candidates.extend(holder.reqs)
        if s.chunked_req is not None:
            candidates.append(s.chunked_req)
        candidates.extend(s.waiting_queue)
        session_kvs = {id(kv) for kv in s.tree_cache.session_records().values()}
        seen: set[int] = set()
        owners = []
        for req in candidates:
            if id(req) in seen:
                continue
            seen.add(id(req))
            if req.kv.holds_kv and id(req.kv) not in session_kvs:
                owners.append(req)
        return owners

    def inputs(self, tally: StepTally, *, batch: Any = None, now_s: float,
               requests: bool = True) -> SampleInputs:
        s = self.scheduler
        owners = self.owning_reqs(batch)
        held = [_SessionHeld(kv) for kv in s.tree_cache.session_records().values() if kv.holds_kv]
        owner_ids = {id(r) for r in owners}
        locked = [r for r in owners if r.lock is not None]
        locked += [r for r in s.waiting_queue if r.lock is not None and id(r) not in owner_ids]
        return SampleInputs(
            tree_cache=s.tree_cache,
            allocator=s.token_to_kv_pool_allocator,
            live_reqs=owners + held,
            leases=[(str(r.rid), r.lock.node) for r in locked],
            labels={str(r.rid): namespace_label(r, self.salt) for r in locked},
            funnel=tally.funnel(),
            counters=tally.counters(),
            mapping=None,
            requests=self.request_views(owners) if requests else (),
            virtual_time_s=now_s,
        )

    def request_views(self, owners: list[Any]) -> tuple[RequestView, ...]:
        """Running, then other row owners (prefilling), then waiting; at most 500."""
        s = self.scheduler
        running = list(s.running_batch.reqs) if s.running_batch is not None else []
        running_ids = {id(r) for r in running}
        waiting_ids = {id(r) for r in s.waiting_queue}
        prefill = [r for r in owners if id(r) not in running_ids and id(r) not in waiting_ids]
        views: list[RequestView] = []
        for state, group in (("running", running), ("prefill", prefill),
                             ("waiting", s.waiting_queue)):
            for req in group:
                if len(views) >= MAX_REQUEST_VIEWS:
                    return tuple(views)
                if req.finished_reason is not None:
                    continue
                views.append(RequestView(
                    rid=str(req.rid), state=state, namespace=namespace_label(req, self.salt),
                    prompt_tokens=len(req.origin_input_ids), output_tokens=len(req.output_ids),
                    prefix_hit_tokens=int(req.cached_tokens),
                    lease_node=req.lock.node if req.lock is not None else None,
                ))
        return tuple(views)

"""The direct decode path's view of the decode batch: parallel columns, kept incrementally.

Every decode step needs the running `Req`s in batch order with their `req_to_token` rows
and committed lengths as int64 arrays, and each decode token touches every request's `kv`
record and `output_ids`. Rebuilding them from `EngineState.running` costs
O(batch) Python per change, and on the shipped trace the batch changes at most steps
(an admission or a finish), so the rebuild ran ~8,000 times in 10,500 steps. Instead
`EngineState` reports each change here and `refresh` applies only the changes:

    running (dict, batch order):   a  b  c  d          then: b finishes, e and f join
    view before:   reqs [a b c d]  rows [4 9 2 7]  committed [40 33 18 51]
    view after:    reqs [a c d e f] rows [4 2 7 5 1] committed [40 18 51 16 30]
                   (leavers deleted in place, joiners appended in join order, read from
                   their `Req` when applied: a dict re-insert also goes to the end)

The view also keeps each request's `kv` record and its `output_ids.append`: reaching them
through the `Req` (a lookup in a dict of ~200 attributes, a cache miss per request at a
batch of ~240) cost 4x the increments themselves. SGLang replaces a `Req`'s `kv` only in
`detach_kv` (streaming sessions) and its `output_ids` only in `reset_for_retract` with
input embeddings, neither while it decodes; a leaver whose records are no longer the
cached ones raises IntegrityError instead of leaving a silently stale column.

A reorder (a retraction's `filter_batch` order) or an overwrite of a running rid marks the
view stale and the next refresh rebuilds it. The committed column is advanced by the
decode calls together with each `Req`'s `kv_committed_len` (cache_ops.DirectCache), so an
applied view equals a rebuilt one; tests/unit/test_batch_view.py checks that over random
change sequences, and the call-fidelity test checks the decode calls it feeds.
"""

from __future__ import annotations

import numpy as np

_I64 = np.int64


class BatchView:
    """Mutates only itself; reads the `Req`s it is given (their row and committed length
    when they are applied)."""

    def __init__(self) -> None:
        self.reqs: list = []
        self.kvs: list = []  # each Req's `kv` (SGLang's ReqKvInfo)
        self.appends: list = []  # each Req's `output_ids.append`
        self.rows = np.empty(0, dtype=_I64)
        self.committed = np.empty(0, dtype=_I64)
        self._events: list[tuple[bool, object]] = []  # (joined?, req) since the last refresh
        self._stale = True
        self.rebuilds = 0  # full rebuilds: the first, one per reorder, any fallback

    def joined(self, req) -> None:
        self._events.append((True, req))

    def left(self, req) -> None:
        self._events.append((False, req))

    def invalidate(self) -> None:
        """The batch changed in a way the events do not describe (a reorder)."""
        self._stale = True
        self._events.clear()

    def refresh(self, running: dict) -> None:
        """Bring the columns in line with `running` (rid -> Tracked, batch order)."""
        if self._stale:
            self._rebuild(running)
        elif self._events:
            self._apply()
            if len(self.reqs) != len(running):  # an event sequence not foreseen: stay right
                self._rebuild(running)

    def _rebuild(self, running: dict) -> None:
        self.reqs = [t.req for t in running.values()]
        self.kvs, self.appends, self.rows, self.committed = _columns(self.reqs)
        self._stale = False
        self._events.clear()
        self.rebuilds += 1

    def _apply(self) -> None:
        pending: list = []  # joined since the last refresh and still running, in join order
        gone: list[int] = []  # positions in the current columns of those who left
        for joined, req in self._events:
            if joined:
                pending.append(req)
                continue
            for i, other in enumerate(pending):
                if other is req:
                    del pending[i]
                    break
            else:
                gone.append(_position(self.reqs, req))
        self._events.clear()
        if gone:
            gone.sort(reverse=True)
            for i in gone:
                _check_records(self.reqs[i], self.kvs[i], self.appends[i])
                del self.reqs[i], self.kvs[i], self.appends[i]
            self.rows = np.delete(self.rows, gone)
            self.committed = np.delete(self.committed, gone)
        if pending:
            kvs, appends, rows, committed = _columns(pending)
            self.reqs.extend(pending)
            self.kvs.extend(kvs)
            self.appends.extend(appends)
            self.rows = np.concatenate([self.rows, rows])
            self.committed = np.concatenate([self.committed, committed])


def _position(reqs: list, req) -> int:
    """Index of `req` in `reqs` (SGLang's `Req` defines no `__eq__`: identity)."""
    try:
        return reqs.index(req)
    except ValueError:
        raise ValueError("a request left the decode batch without having joined it") from None


def _check_records(req, kv, append) -> None:
    if req.kv is not kv or req.output_ids is not append.__self__:
        from engine_adapter.base.errors import IntegrityError

        raise IntegrityError(f"request {req.rid}'s kv record or output ids were replaced while "
                             "it decoded: the decode batch's columns missed its tokens")


def _columns(reqs: list) -> tuple[list, list, np.ndarray, np.ndarray]:
    """(kv records, output appenders, rows, committed lengths) of `reqs`."""
    kvs = [r.kv for r in reqs]
    appends = [r.output_ids.append for r in reqs]
    n = len(reqs)
    rows = np.fromiter((kv.req_pool_idx for kv in kvs), dtype=_I64, count=n)
    committed = np.fromiter((kv.kv_committed_len for kv in kvs), dtype=_I64, count=n)
    return kvs, appends, rows, committed

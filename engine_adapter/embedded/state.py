"""The embedded engine's mutable state, shared by its scheduler pieces.

One object so that the admission, decode, retention and instrumentation modules operate on
the same clock, queues and counters without reaching into each other. Single-threaded: the
engine mutates it only inside `step()`; snapshots read it between steps.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.cost_model import RooflineCostModel
from engine_adapter.embedded.batch_view import BatchView
from engine_adapter.embedded.decode_log import DecodeLog
from engine_adapter.embedded.oracle import ContentOracle
from engine_adapter.embedded.requests import FinishedRecord, RequestSpec, Tracked
from engine_adapter.embedded.sglang_runtime import SGLangComponents
from engine_adapter.instrument.funnel_recorder import FunnelRecorder
from engine_adapter.receipts import Receipt
from engine_adapter.snapshot import Counters


class MutableCounters:
    """The mutable twin of `Counters`: the same fields, all starting at zero."""

    def __init__(self) -> None:
        for f in dataclasses.fields(Counters):
            setattr(self, f.name, type(f.default)())

    def freeze(self) -> Counters:
        return Counters(**vars(self))


@dataclass(kw_only=True)
class RetentionLease:
    """A lock kvctl holds on a finished turn's path while its session waits on a tool."""

    session: str
    lock: Any  # sglang TreeLock
    node_id: int
    tokens: int
    since_s: float


class RollbackDigests(NamedTuple):
    """`state_digest` before an admission and after its rollback (None unless
    `EngineState.digest_admissions`): equal when the rollback restored the state."""

    before: tuple | None
    after: tuple | None


@dataclass(kw_only=True)
class EngineState:
    config: EngineConfig
    sg: SGLangComponents
    cost: RooflineCostModel
    oracle: ContentOracle  # or NullOracle with instrumentation off
    funnel: FunnelRecorder = field(default_factory=FunnelRecorder)
    counters: MutableCounters = field(default_factory=MutableCounters)
    clock_s: float = 0.0
    generation: int = 0
    future: list[tuple[float, int, RequestSpec]] = field(default_factory=list)
    waiting: deque[Tracked] = field(default_factory=deque)
    partial: deque[Tracked] = field(default_factory=deque)  # hold rows, prompt not done
    reloading: list[Tracked] = field(default_factory=list)
    running_batch: Any = None  # sglang ScheduleBatch of decoding requests (exact batches only)
    running: dict[str, Tracked] = field(default_factory=dict)  # rid -> tracked, decoding, batch order
    leases: dict[str, RetentionLease] = field(default_factory=dict)  # session -> lease
    finished: list[FinishedRecord] = field(default_factory=list)
    receipts: list[Receipt] = field(default_factory=list)
    by_rid: dict[str, Tracked] = field(default_factory=dict)
    namespace_salt: str = ""  # per engine; see prefill.namespace_label
    last_rollback: RollbackDigests | None = None
    last_rollback_step: int = -1
    digest_admissions: bool = False  # keep a state digest around admissions (fault checks)
    decode_log: DecodeLog | None = None  # the decode step clocks (decode_log.py; Decode sets it)
    batch_view: BatchView | None = None  # the direct decode path's columns (batch_view.py)
    whatif: Any = None  # WhatIfShadow fed by whatif_feed after each step; None: off
    whatif_feed: Any = None  # whatif_feed.WhatIfFeed (the step's cache events)
    hicache: Any = None  # HiCacheReader on SGLang's host tier (embedded/hicache.py); None: off
    _seq: itertools.count = field(default_factory=itertools.count)
    _output_token: itertools.count = field(default_factory=lambda: itertools.count(1 << 30))

    def push_future(self, spec: RequestSpec) -> None:
        heapq.heappush(self.future, (spec.arrival_s, next(self._seq), spec))

    def pop_due(self) -> list[RequestSpec]:
        due = []
        while self.future and self.future[0][0] <= self.clock_s:
            due.append(heapq.heappop(self.future)[2])
        return due

    def next_output_token(self) -> int:
        """Synthetic output ids: unique, disjoint from prompt ids (< 2^30), < 2^31."""
        return next(self._output_token)

    def take_output_tokens(self, count: int) -> int:
        """Draw `count` consecutive synthetic ids at once (a decode jump); returns the first."""
        first = next(self._output_token)
        self._output_token = itertools.count(first + count)
        return first

    def join_running(self, tr: Tracked) -> None:
        """`tr` joins the decode batch (at its end: the batch's order)."""
        rid = tr.req.rid
        view = self.batch_view
        if view is not None:
            if rid in self.running:  # an overwrite keeps its place: not a join
                view.invalidate()
            else:
                view.joined(tr.req)
        self.running[rid] = tr
        if self.decode_log is not None:
            self.decode_log.join(tr)

    def leave_running(self, tr: Tracked) -> None:
        """`tr` leaves the decode batch (finish, retraction, abort); its ITL is complete."""
        left = self.running.pop(tr.req.rid, None)
        if left is not None and self.batch_view is not None:
            self.batch_view.left(left.req)
        if self.decode_log is not None:
            self.decode_log.leave(tr)

    def reorder_running(self, rids: list[str]) -> None:
        """The decode batch becomes `rids`, in that order (SGLang's filter_batch after a
        retraction keeps the survivors in retraction order)."""
        self.running = {rid: self.running[rid] for rid in rids}
        if self.batch_view is not None:
            self.batch_view.invalidate()

    def live_tracked(self) -> list[Tracked]:
        """Requests that may hold KV rows: prefilling, decoding, reloading."""
        return [*self.running.values(), *self.reloading, *self.partial]

    def receipt(self, **fields: Any) -> None:
        """Record a receipt when the engine was asked to (EngineConfig.receipts)."""
        if self.config.receipts:
            self.receipts.append(Receipt(**fields))

"""Per-scheduler plugin state: cadences, failure budget, the latest snapshot.

Every call arrives from SGLang's scheduler thread through hooks.py, at a step boundary::

    _add_request_to_queue  -> on_arrival   tally; with KVCTL_RECORD=1 the prompt's salted
                                           block hashes (recording/tap.py)    O(1) / O(prompt)
    ingest_requests        -> step_timer   a scheduling round starts (step_timer.py)  O(1)
    run_batch              -> step_timer   the forward returned (CPU device only)     O(1)
                              (the step timer runs once /step_samples was read, or from
                              startup with KVCTL_PLUGIN_STEP_TIMING=1: read_step_timer)
    process_batch_result   -> on_batch     the step's time and shape (step_timer.py), tally,
                                           finished requests to the recording,
                                           then maybe_sample                  O(batch)
    on_idle                -> on_idle      maybe_sample
    eviction probe         -> on_evict     tally + an `eviction` receipt
    (first extend of a request)            a `match` receipt (receipt_log.py); the what-if
                                           shadow buffers its admission (instrument/whatif.py)
    (a request's finish)                   the shadow buffers its release
    (after an extend batch)                the shadow buffers each member's insert (SGLang's
                                           checkpoint_kv_cache); all are applied in order at
                                           each sample, before its curve is read
    maybe_sample: every KVCTL_PLUGIN_LEDGER_S  ledger + refcount reconciliation + requests
                  every KVCTL_PLUGIN_TREE_S    also the per-node tree read (a full walk)

Between tree reads a sample carries the last per-node read forward, with a note saying how
old it is. The HTTP thread (server.py) only reads `latest` (an immutable Snapshot, swapped
by one assignment) and `health()`; it never touches SGLang's objects.

Failure behaviour: `guard()` runs a hook body, catches any exception, counts it and logs it;
at `max_failures` the runtime disables itself, stops sampling and says why in /healthz.
Nothing raised here ever reaches SGLang.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from engine_adapter.instrument.sampler import Sampler
from engine_adapter.plugin.hicache_reader import HiCacheReader
from engine_adapter.plugin.receipt_log import ReceiptLog
from engine_adapter.plugin.scheduler_host import SchedulerHost, namespace_label
from engine_adapter.plugin.settings import PluginSettings
from engine_adapter.plugin.step_timer import StepTimer
from engine_adapter.plugin.tally import StepTally
from engine_adapter.receipts import Receipt
from engine_adapter.recording.tap import RecordingTap
from engine_adapter.snapshot import EngineInfo, Snapshot, TreeNodes, TreeStats

logger = logging.getLogger("kvctl.plugin")
STEP_TIMER_IDLE_S = 600.0  # an on-demand step timer unread this long stops timing


def _whatif_shadow(settings: PluginSettings, info: EngineInfo):
    """The what-if shadow for this scheduler's pool, or None when turned off."""
    if settings.whatif_rate <= 0 or info.pool_tokens <= 0:
        return None
    from engine_adapter.instrument.whatif import WhatIfShadow, fitted_rate

    rate = fitted_rate(settings.whatif_rate, pool_tokens=info.pool_tokens,
                       page_size=info.page_size)  # the configured rate is a floor
    return WhatIfShadow(pool_tokens=info.pool_tokens, page_size=info.page_size, rate=rate)


class PluginRuntime:
    """See module docstring. `clock` (monotonic seconds) drives the cadences."""

    def __init__(self, scheduler: Any, settings: PluginSettings, *, dp_rank: int,
                 info: EngineInfo, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.dp_rank = dp_rank
        self.host = SchedulerHost(scheduler, salt=secrets.token_hex(8))
        self.whatif = _whatif_shadow(settings, info)
        self._reserved = 0  # the pool's private tokens at the last step's end (what-if)
        self.tally = StepTally(on_admit=self._admitted,
                               on_finish=self._finished if self.whatif is not None else None)
        self.receipts = ReceiptLog()
        # off unless KVCTL_RECORD=1 (kvctl record); blocks of the server's page by default
        self.recording = RecordingTap.from_env(page_size=info.page_size)
        # /step_samples (kvctl calibrate, kvctl record); the CPU runs forwards in run_batch.
        # The hooks feed `step_timer` only (None: not timing); /step_samples serves
        # `_served_timer` and arms it (read_step_timer) unless it times from startup.
        device = getattr(getattr(scheduler, "server_args", None), "device", None)
        self._served_timer = (StepTimer(synchronous=str(device) == "cpu")
                              if settings.step_timing else None)  # KVCTL_PLUGIN_STEP_TIMING=0
        self.step_timer = self._served_timer if settings.step_timing_from_start else None
        self._step_lock = threading.Lock()  # arming (HTTP thread) against disarming
        self._step_read_s = 0.0
        self.sampler = Sampler(info)
        self.clock = clock
        self.started_s = clock()
        self.latest: Snapshot | None = None
        self.failures = 0
        self.disabled_reason: str | None = None
        self.samples = 0
        self.server: Any = None  # server.PluginServer once attach() started it
        self._next_sample_s = self.started_s  # the first boundary samples
        self._next_tree_s = self.started_s
        self._last_tree: tuple[TreeStats, TreeNodes, float] | None = None
        # SGLang's HiCache host tier, when the server has one (None: no host tier)
        self.hicache = HiCacheReader.attach(scheduler.tree_cache, self.fail)

    @property
    def disabled(self) -> bool:
        return self.disabled_reason is not None

    # ---- hook bodies (scheduler thread) -------------------------------------------------

    def on_arrival(self, is_retracted: bool, req: Any = None) -> None:
        self.tally.on_arrival(is_retracted)
        if req is not None and not is_retracted and self.recording.enabled:
            self.recording.on_request_arrival(req)  # a retracted request re-enters: not new

    def on_batch(self, batch: Any) -> None:
        if self.step_timer is not None:  # first: the step ends before kvctl's own work
            self.step_timer.on_processed(batch)
        self.tally.on_batch(batch)  # admissions (what-if: matched), then finishes
        if self.whatif is not None:
            self.guard(self._whatif_inserts, batch)
        if self.recording.enabled:
            for req in batch.reqs:
                if req.finished_reason is not None:  # a repeated finish is ignored by the tap
                    self.recording.on_request_finish(req)
        if self.clock() >= self._next_sample_s:  # inline: this runs on every step
            self.maybe_sample(batch)

    def on_idle(self) -> None:
        if self.clock() >= self._next_sample_s:
            self.maybe_sample(None)

    def on_evict(self, requested: int, evicted: int, protected_after: int) -> None:
        self.guard(self._evicted, requested, evicted, protected_after)

    def evict_failed(self, exc: Exception) -> None:
        """The eviction probe could not read a call's numbers (probes.py `on_error`)."""
        if not self.disabled:
            self.fail(exc)

    def _evicted(self, requested: int, evicted: int, protected_after: int) -> None:
        self.tally.on_evict(requested, evicted, protected_after)
        if evicted:
            at = self.clock() - self.started_s
            self.receipts.append(Receipt(kind="eviction", start_s=at, end_s=at, tokens=evicted))

    def _admitted(self, req: Any, hit: int) -> None:
        if self.hicache is not None:
            self.hicache.on_admit(req)
        if self.whatif is not None:  # matched: its hit is decided at the last step's pool
            self.whatif.admit(req.rid, req.origin_input_ids,
                              namespace=namespace_label(req, self.host.salt),
                              cached_tokens=hit, reserved_tokens=self._reserved)
        at = self.clock() - self.started_s
        self.receipts.append(Receipt(
            kind="match", start_s=at, end_s=at, tokens=hit, outcome="hit" if hit else "miss",
            namespace=namespace_label(req, self.host.salt), request=str(req.rid)))

    def _finished(self, req: Any) -> None:
        self.whatif.release(req.rid, prompt_tokens=len(req.origin_input_ids),
                            output_tokens=len(req.output_ids),
                            output_ids=list(req.output_ids),
                            reserved_tokens=self._private_tokens())

    def _whatif_inserts(self, batch: Any) -> None:
        """After an extend batch SGLang inserted each unfinished member's prefilled tokens
        (checkpoint_kv_cache: cache_protected_len now); the pool's private part is read
        once (O(1), about 3 us: SGLang's available_size most of it) and kept for the next
        step's admissions, matched before it changes. An empty batch allocated and freed
        nothing (and eviction moves no private token), so the last reading stands."""
        if not batch.reqs:
            return
        reserved = self._reserved = self._private_tokens()
        mode = getattr(batch, "forward_mode", None)
        if mode is None or not mode.is_extend():
            return
        for req in batch.reqs:
            if req.finished_reason is None:
                self.whatif.insert(req.rid, req.kv.cache_protected_len,
                                   reserved_tokens=reserved)

    def _private_tokens(self) -> int:
        """Token slots running requests hold outside the tree (ledger.py's private term):
        pool - free - evictable - protected, from the allocator's and tree's counters."""
        s = self.host.scheduler
        tree = s.tree_cache
        allocator = s.token_to_kv_pool_allocator
        return max(int(allocator.size - allocator.available_size() - tree.evictable_size()
                       - tree.protected_size()), 0)

    def read_step_timer(self) -> StepTimer | None:
        """The step timer /step_samples serves (None: KVCTL_PLUGIN_STEP_TIMING=0), armed:
        on demand, steps are timed from the next one on (HTTP thread; one assignment)."""
        with self._step_lock:
            timer = self._served_timer
            if timer is not None and self.step_timer is None:
                self.step_timer = timer
            self._step_read_s = self.clock()
        return timer

    def _disarm_idle_step_timer(self, now: float) -> None:
        """An on-demand timer nobody read for STEP_TIMER_IDLE_S stops timing; the next read
        starts a fresh one (a new timer_id: readers see a restart, not a gap)."""
        with self._step_lock:
            if now - self._step_read_s <= STEP_TIMER_IDLE_S:
                return
            old = self._served_timer
            self.step_timer = None
            self._served_timer = StepTimer(synchronous=old.synchronous, clock=old.clock)
            self._served_timer.started_s = old.started_s  # end_s: since the plugin attached

    def maybe_sample(self, batch: Any) -> None:
        now = self.clock()
        if now < self._next_sample_s:
            return
        self._next_sample_s = now + self.settings.ledger_s
        if (self.step_timer is not None and not self.settings.step_timing_from_start
                and now - self._step_read_s > STEP_TIMER_IDLE_S):
            self._disarm_idle_step_timer(now)
        per_node = now >= self._next_tree_s
        if per_node:
            self._next_tree_s = now + self.settings.tree_s
        self.sample(batch, per_node=per_node, now=now)

    def sample(self, batch: Any, *, per_node: bool, now: float) -> Snapshot:
        """Read SGLang's objects now and publish the snapshot as `latest`."""
        inputs = self.host.inputs(self.tally, batch=batch, now_s=now - self.started_s)
        if self.hicache is not None:  # HiCache's in-flight transfers lock nodes too
            inputs = inputs._replace(leases=inputs.leases + self.hicache.transfer_leases())
        if self.whatif is not None:
            inputs = inputs._replace(whatif=self.whatif.curve())
        snap = self.sampler.sample(inputs, per_node_refs=per_node, wall_s=time.time())
        if self.hicache is not None:
            snap = self._with_host_tier(snap, per_node)
        if per_node:
            self._last_tree = (snap.tree, snap.tree_nodes, now)
        elif self._last_tree is not None:
            snap = self._carry_tree(snap, now)
        self.latest = snap
        self.samples += 1
        return snap

    def _with_host_tier(self, snap: Snapshot, per_node: bool) -> Snapshot:
        try:
            return self.hicache.complete(snap, per_node=per_node)
        except Exception as exc:  # the host tier exists: unread, it is unknown, never 0
            self.fail(exc)
            ledger = dataclasses.replace(snap.ledger, host_tokens=None)
            return dataclasses.replace(snap, ledger=ledger, notes=snap.notes + (
                f"host tier: not read ({type(exc).__name__})",))

    def _carry_tree(self, snap: Snapshot, now: float) -> Snapshot:
        stats, nodes, read_s = self._last_tree
        tree = dataclasses.replace(stats, cached_tokens=snap.tree.cached_tokens,
                                   tokens_by_medium=snap.tree.tokens_by_medium)
        note = f"tree: per-node read {now - read_s:.1f} s old"
        return dataclasses.replace(snap, tree=tree, tree_nodes=nodes, notes=snap.notes + (note,))

    # ---- failures -------------------------------------------------------------------------

    def guard(self, body: Callable[..., Any], *args: Any) -> None:
        """Run `body(*args)` unless disabled; count and swallow any exception."""
        if self.disabled:
            return
        try:
            body(*args)
        except Exception as exc:  # never into SGLang: counted, logged, budgeted
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        self.failures += 1
        reason = f"{type(exc).__name__}: {exc}"
        logger.warning("kvctl plugin: failure %d of %d: %s", self.failures,
                       self.settings.max_failures, reason)
        if self.failures >= self.settings.max_failures and not self.disabled:
            self.disabled_reason = f"disabled after {self.failures} failures; last: {reason}"
            logger.error("kvctl plugin: %s", self.disabled_reason)

    def health(self) -> dict:
        """The /healthz body (without the version fields server.py adds)."""
        if self.disabled:
            status = "disabled"
        else:
            status = "ok" if self.latest is not None else "starting"
        return {"status": status, "failures": self.failures,
                "disabled_reason": self.disabled_reason, "dp_rank": self.dp_rank,
                "steps": self.tally.steps}

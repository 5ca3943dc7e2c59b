"""`EmbeddedEngine`: SGLang's real KV cache, driven by kvctl's scheduler loop, instrumented.

Usage::

    engine = EmbeddedEngine(EngineConfig(pool_tokens=65_536, page_size=16))
    engine.submit(RequestSpec(rid="r1", tokens=np.arange(1, 600), max_new_tokens=32))
    while engine.has_work():
        report = engine.step()          # one modeled forward step on the virtual clock
    snap = engine.snapshot()            # immutable, consistent
    engine.check_integrity()            # raises IntegrityError with the numbers

All cache state lives in SGLang's objects (UnifiedRadixCache, paged allocator, pools, Req);
kvctl owns only the queues, the virtual clock and the instrumentation. Single-threaded:
callers serialize `step()` and `snapshot()` (the live runner does).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass


from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.cache_ops import DirectCache
from engine_adapter.embedded.batches import Batch, Batches
from engine_adapter.embedded.decode import Decode
from engine_adapter.embedded.decode_cache import BatchDecodeCache, DirectDecodeCache
from engine_adapter.embedded.faults import FaultInjector
from engine_adapter.embedded.hicache import check_events
from engine_adapter.embedded.jumps import JumpPlanner
from engine_adapter.embedded.oracle import ContentOracle, NullOracle
from engine_adapter.embedded.door import admit_arrivals
from engine_adapter.embedded.prefill import Prefill
from engine_adapter.embedded.requests import FinishedRecord, RequestSpec
from engine_adapter.embedded.retention import Retention
from engine_adapter.embedded.sglang_runtime import SGLangComponents, build_components
from engine_adapter.embedded.snapshot_builder import SnapshotBuilder
from engine_adapter.embedded.stalls import Stalls
from engine_adapter.embedded.step_cost import build_cost_model
from engine_adapter.embedded.state import EngineState, RollbackDigests
from engine_adapter.instrument.probes import install_eviction_probe
from engine_adapter.receipts import Receipt
from engine_adapter.snapshot import Snapshot
from engine_adapter.base.errors import InputError, IntegrityError

@dataclass(frozen=True, kw_only=True)
class StepReport:
    """What one `step()` did. `idle`: nothing runnable now or later; `advanced_s`: clock delta."""

    clock_s: float
    advanced_s: float
    prefill_tokens: int
    decode_requests: int
    finished: tuple[FinishedRecord, ...]
    free_tokens: int = 0  # allocator free slots after the step
    evictable_tokens: int = 0  # tree evictable tokens after the step
    idle: bool = False
    steps: int = 1  # scheduling steps this report stands for (> 1: a decode jump)
    # (clock_s, free_tokens, evictable_tokens) at the end of the first of `steps`, when that
    # step was a prefill round's decode step merged into the jump after it (`merge_check`)
    first: tuple[float, int, int] | None = None
    loaded_tokens: int = 0  # K/V tokens HiCache loaded host -> device for this step's prefill


class EmbeddedEngine:
    """See module docstring. Mutates only SGLang objects it built and its own state.

    Its scheduler state is private (`_st`): collaborators read it through the named
    methods (`clock_s`, `generation`, `last_rollback`, `snapshot`, `faults.ready`), tests
    through `sglang_components()` and `internal_state()`."""

    def __init__(self, config: EngineConfig) -> None:
        config.validate()
        self.config = config
        sg = build_components(config)
        self._st = EngineState(
            config=config, sg=sg, cost=build_cost_model(config),
            oracle=(ContentOracle(config.page_size, config.seed,
                                  expected_pages=config.oracle_pages_hint)
                    if config.instrument else NullOracle()),
        )
        self._st.namespace_salt = config.namespace_salt or secrets.token_hex(8)
        if config.whatif_rate > 0:
            from engine_adapter.embedded.whatif_feed import attach_whatif

            attach_whatif(self._st)
        if config.hicache_ratio is not None:  # SGLang's HiCache: its figures, per request
            from engine_adapter.embedded.hicache import attach_reader

            self._st.hicache = attach_reader(sg.tree_cache)
            self._st.funnel.observers.append(lambda tracked: self._st.hicache.on_admit(tracked.req))
        self.retention = Retention(self._st)
        cache = None if config.uses_batches else DirectCache(sg)
        self.prefill = Prefill(self._st, self.retention, cache)
        self.decode = Decode(self._st, self.retention, BatchDecodeCache(self._st) if cache is None
                             else DirectDecodeCache(self._st, cache), self.prefill.admission)
        jumps = JumpPlanner(self._st, self.decode, self.prefill.admission, config.decode_jumps)
        self.faults = FaultInjector(self._st)
        self.model = None  # the tiny model's forward (model_runner.py), when configured
        if config.tiny_model:
            from engine_adapter.embedded.model_runner import ModelRunner

            self.model = ModelRunner(self._st)
        self.batches = Batches(self._st, self.prefill, self.decode, jumps, self.model)
        self.stalls = Stalls(self._st, self.retention)
        self._snapshots = SnapshotBuilder(self._st, self.retention)
        install_eviction_probe(sg.tree_cache, self._on_evict)
        self._started_wall = time.monotonic()
        self._rejected: list[FinishedRecord] = []
        # (clock before, after) of a round's decode step -> may it start the jump after it
        # (jumps.py; StepReport.first then carries its end state)? None: never. The runner's.
        self.merge_check: Callable[[float, float], bool] | None = None

    # ---- workload ----------------------------------------------------------------------

    def submit(self, spec: RequestSpec) -> None:
        """Queue a request; it arrives at `spec.arrival_s` on the virtual clock. One that
        SGLang would refuse (longer than the pool or the context) is refused on arrival:
        a `FinishedRecord` with `rejected` set, listed by `rejections()`."""
        if len(spec.tokens) == 0 or spec.max_new_tokens <= 0:
            raise InputError(f"request {spec.rid}: needs at least one prompt and one output token")
        self._st.counters.requests_submitted += 1
        self._st.push_future(spec)

    def rejections(self) -> tuple[FinishedRecord, ...]:
        """Every request refused so far, in arrival order (its `rejected` says why)."""
        return tuple(self._rejected)

    @property
    def cost(self):
        """The cost model pricing this engine's virtual clock: the roofline, or a step-cost
        model fitted to a server (`EngineConfig.step_cost`, step_cost.py)."""
        return self._st.cost

    @property
    def clock_s(self) -> float:
        """The virtual clock, in modeled seconds."""
        return self._st.clock_s

    @property
    def generation(self) -> int:
        """The model-weight generation (`bump_generation`); part of every cache key, so an
        entry cached under an older generation never hits."""
        return self._st.generation

    def has_work(self) -> bool:
        st = self._st
        return bool(st.future or st.waiting or st.partial or st.reloading or st.running)

    def step(self, *, horizon_s: float | None = None) -> StepReport:
        """One step in the order of SGLang's `event_loop_normal` (srt/managers/scheduler.py),
        each piece entered once:

            1. arrivals pass SGLang's door and queue (door.py)
            2. HiCache acks (check_hicache_events), then kvctl's finished reloads; an idle
               engine's clock jumps to the next arrival or reload (stalls.py)
            3. the batch, chosen as get_next_batch_to_run chooses it: a prefill round, a
               decode step, or a decode jump of several steps (batches.py); a decode step
               sets or decays new_token_ratio before its prepare_for_decode, as
               update_running_batch does (decode.py, admission.py `before_decode`)
            4. its forward: the tiny model when one runs, the cost model's clock
            5. its result: first tokens, published chunks, output tokens, finishes
            6. a request left the running batch: batch_is_full clears, as the next
               get_next_batch_to_run's filter_batch does (admission.py `after_step`)
            7. a step that ran nothing: retry a rollback or resolve the stall (stalls.py)

        A jump (`StepReport.steps` > 1, direct path only) never runs past the next
        arrival or `horizon_s`."""
        st = self._st
        st.finished = []
        start, finished_before = st.clock_s, st.counters.requests_finished
        self._arrivals()
        self._transfers()
        if not (st.waiting or st.partial or st.running):  # idle: wait for the next event
            if not self.stalls.jump_to_next_event():
                return self._report(start, idle=True)
            self._arrivals()  # what the event brought (the door, as SGLang's next loop)
        batch = self.batches.next_batch(start, horizon_s, self.merge_check)
        tokens = self.batches.run(batch)
        shrunk = self.batches.complete(batch, tokens)
        if st.whatif_feed is not None:  # the step's matches, inserts and finishes, in order
            st.whatif_feed.after_step(batch)
        st.counters.steps += batch.steps
        self.prefill.admission.after_step(
            shrunk or st.counters.requests_finished != finished_before)
        self.stalls.after_step(batch.ran, start)
        return self._report(start, batch)

    def _transfers(self) -> None:
        """SGLang's HiCache acks (check_hicache_events, get_next_batch_to_run's first), then
        kvctl's modeled host-tier reloads whose transfer is done (host_tier.py)."""
        check_events(self._st.sg.tree_cache)
        self.retention.complete_reloads()

    def _report(self, start: float, batch: Batch | None = None, *, idle: bool = False,
                steps: int | None = None) -> StepReport:
        st = self._st
        batch = batch or Batch("none")
        return StepReport(clock_s=st.clock_s, advanced_s=st.clock_s - start,
                          prefill_tokens=batch.plan.computed_tokens,
                          decode_requests=batch.decode.requests, finished=tuple(st.finished),
                          idle=idle, steps=batch.steps if steps is None else steps,
                          first=batch.first, loaded_tokens=batch.plan.loaded_tokens,
                          free_tokens=st.sg.allocator.available_size(),
                          evictable_tokens=st.sg.tree_cache.evictable_size())

    def run_until_idle(self, max_steps: int | None = None) -> list[FinishedRecord]:
        """Step until no work is left (or `max_steps`); returns every finished record."""
        finished: list[FinishedRecord] = []
        steps = 0
        while self.has_work() and (max_steps is None or steps < max_steps):
            report = self.step()
            finished.extend(report.finished)
            steps += report.steps
        return finished

    def _arrivals(self) -> None:
        """Due requests pass SGLang's door and queue, or are refused (door.py)."""
        admit_arrivals(self._st, self.config, self._rejected)

    def _on_evict(self, requested: int, evicted: int, protected_after: int) -> None:
        st = self._st
        if evicted:
            st.counters.evictions += 1
            st.counters.evicted_tokens += evicted
            st.receipt(kind="eviction", start_s=st.clock_s, end_s=st.clock_s, tokens=evicted)
        if evicted < requested and protected_after > 0:
            st.counters.locked_eviction_rejects += 1

    # ---- operator actions --------------------------------------------------------------

    def bump_generation(self) -> int:
        """A model weight update: every cached entry becomes stale and must never hit."""
        self._st.generation += 1
        return self._st.generation

    def settle_transfers(self) -> None:
        """Reap SGLang's finished HiCache transfers now (`check_hicache_events`, what an idle
        scheduler loop does next); nothing without HiCache."""
        check_events(self._st.sg.tree_cache)

    def flush_cache(self) -> int:
        """Evict every unlocked cached prefix; returns tokens evicted."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        tree = self._st.sg.tree_cache
        if self._st.whatif_feed is not None:
            self._st.whatif_feed.flush_cache()
        return tree.evict(EvictParams(num_tokens=tree.evictable_size())).num_tokens_evicted

    # ---- reads -------------------------------------------------------------------------

    def snapshot(self, *, per_node_refs: bool = False, requests: bool = True,
                 reconcile_refs: bool = True) -> Snapshot:
        """One consistent read. per_node_refs: also read SGLang's per-node lock refs (slow);
        requests: include the per-request views (up to 500); reconcile_refs=False: skip the
        derived side of the refcount check (`refs.derived_protected_tokens` is None)."""
        return self._snapshots.build(per_node_refs=per_node_refs, requests=requests,
                                     reconcile_refs=reconcile_refs,
                                     wall_s=time.monotonic() - self._started_wall)

    def check_integrity(self) -> Snapshot:
        """Raise IntegrityError naming every violated invariant; return the snapshot read."""
        snap = self.snapshot(per_node_refs=True)
        problems = self._snapshots.violations(snap)
        if problems:
            raise IntegrityError("; ".join(problems))
        return snap

    def last_rollback(self) -> RollbackDigests | None:
        """The most recent admission rollback (a failed allocation undone), or None if none
        happened yet. Its digests are filled only while admissions are digested (the
        alloc-fail fault turns that on); equal digests prove the rollback left the state
        (free + evictable, protected, rows, queues, leases) exactly as it found it."""
        return self._st.last_rollback

    def sglang_components(self) -> SGLangComponents:
        """The SGLang objects this engine drives (tree, allocator, pools), for tests and
        fault checks that inspect them. Reading them between steps is safe; changing them
        voids every invariant `check_integrity` proves."""
        return self._st.sg

    def internal_state(self) -> EngineState:
        """The scheduler's mutable state (queues, tracked requests, leases), for tests that
        assert on it between steps. Product code uses the named reads above and
        `snapshot()`; the fields here may change meaning with the scheduler."""
        return self._st

    def take_receipts(self) -> list[Receipt]:
        receipts, self._st.receipts = self._st.receipts, []
        return receipts

    def take_kv_events(self) -> list:
        """SGLang's own KV events (BlockStored/BlockRemoved/AllBlocksCleared) since last call."""
        events = self._st.sg.tree_cache.take_events()
        self._st.counters.kv_events += len(events)
        return events

    def close(self) -> None:
        """Nothing to release for CPU pools; present for the SnapshotSource protocol."""

    # ---- paced waiting (a live run whose virtual clock follows wall time) ---------------

    def next_event_s(self) -> float | None:
        """When the engine next has something to do: `clock_s` when work is runnable now
        (queued, prefilling or decoding requests, an arrival or reload completion due),
        else the earliest pending arrival or reload completion, the time an idle `step()`
        would jump its clock to; None when nothing is pending at all. Read-only."""
        return self.stalls.next_event_s()

    def wait_until(self, to_s: float) -> StepReport:
        """Advance an idle engine's clock to `to_s` (not past its next event) without running
        anything: a paced runner waiting in wall time for the next arrival instead of
        jumping to it. Returns a report of that wait (`steps` 0)."""
        start = self._st.clock_s
        self.stalls.wait_until(to_s)
        self._st.finished = []
        return self._report(start, steps=0)

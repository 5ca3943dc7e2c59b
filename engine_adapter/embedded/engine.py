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
from engine_adapter.embedded.decode import Decode
from engine_adapter.embedded.decode_direct import DirectDecode
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
        self._jumps = False
        if config.decode_quantum > 1:
            from engine_adapter.embedded.decode_quantum import QuantumDecode

            self.decode = QuantumDecode(self._st, self.retention, config.decode_quantum, cache)
        elif cache is None:
            self.decode = Decode(self._st, self.retention)
        else:
            self.decode = DirectDecode(self._st, self.retention, cache)
            self._jumps = config.decode_jumps
        self.jumps = JumpPlanner(self._st, self.decode, self.prefill.admission, self._jumps)
        self.faults = FaultInjector(self._st)
        self.model = None
        if config.tiny_model:
            from engine_adapter.embedded.model_runner import ModelRunner

            self.model = ModelRunner(self._st)
        self._snapshots = SnapshotBuilder(self._st, self.retention)
        install_eviction_probe(sg.tree_cache, self._on_evict)
        self._started_wall = time.monotonic()
        self._rollbacks_in_a_row = 0
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
        """One step in the order of SGLang's `event_loop_normal` / `get_next_batch_to_run`
        (srt/managers/scheduler.py): 1. arrivals pass the door and queue; 2. a prefill
        round (admission.py: SchedulePolicy + PrefillAdder) whose batch, if any, is this
        step; 3. else decode (check_decode_mem, retract_decode when short, the
        new_token_ratio, prepare_for_decode); 4. tokens, finishes, the clock.
        On the direct path, when no prefill round can run, one call may run several decode
        steps (`StepReport.steps`, jumps.py), never past the next arrival or `horizon_s`."""
        st = self._st
        st.finished = []
        start = st.clock_s
        finished_before = st.counters.requests_finished
        self._arrivals()
        check_events(st.sg.tree_cache)  # SGLang's HiCache acks (get_next_batch_to_run's first)
        self.retention.complete_reloads()
        if not (st.waiting or st.partial or st.running):
            if not self._jump_to_next_event():
                return self._report(start, 0, 0, idle=True)
            self._arrivals()
        clocks = self.jumps.clocks(horizon_s)  # jumps.py: when steps may run at once
        if clocks:
            return self._decode_jump(clocks, start)
        plan = self.prefill.schedule()
        decode_requests = 0
        if (not plan.allocated and self.merge_check is not None
                and st.last_rollback_step != st.counters.steps):
            clocks = self.jumps.clocks(horizon_s)  # this round's decode step starts a jump
            if clocks and self.merge_check(start, clocks[0]):
                return self._decode_jump(clocks, start, first=self.jumps.first_state(clocks))
        if plan.allocated:  # SGLang runs the prefill batch first; decode waits a step
            first_tokens = (self.model.prefill(plan.batch, plan.members)
                            if self.model is not None and plan.batch is not None else None)
            st.clock_s += st.cost.step_seconds(plan.computed_tokens, 0, 0, plan.members,
                                               loaded_tokens=plan.loaded_tokens)  # HiCache's
            self.prefill.complete(plan, first_tokens)
            if any(st.running.get(t.req.rid) is not t for t in plan.members):
                self.prefill.admission.on_batch_shrunk()  # last_batch.filter_batch shrank it
        elif st.running:
            decode_requests = self._decode()
        st.counters.steps += 1
        if st.counters.requests_finished != finished_before:
            self.prefill.admission.on_batch_shrunk()
        rolled_back = st.last_rollback is not None and st.last_rollback_step == st.counters.steps - 1
        if not plan.allocated and decode_requests == 0 and st.clock_s == start and not st.finished:
            if rolled_back and self._rollbacks_in_a_row < 3:
                self._rollbacks_in_a_row += 1  # a failed allocation: retry next step
            else:
                self._resolve_stall()
        if not rolled_back:
            self._rollbacks_in_a_row = 0
        return self._report(start, plan.computed_tokens, decode_requests, loaded=plan.loaded_tokens)

    def _decode(self) -> int:
        """One decode step (update_running_batch, the forward); returns its batch size."""
        st = self._st
        shrinks = (st.counters.retractions, st.counters.allocation_failures)
        decode_requests, decode_context = self.decode.prepare()
        retracted = (st.counters.retractions, st.counters.allocation_failures) != shrinks
        # the kept requests matter only after a retraction (their list costs O(batch))
        self.prefill.admission.on_decode(
            retracted, [t.req for t in st.running.values()] if retracted else ())
        if not decode_requests:
            return 0
        decode_tokens = (self.model.decode(st.running_batch)
                         if self.model is not None else None)
        # a quantum stands for `iterations` decode iterations (decode_quantum.py)
        st.clock_s += self.decode.iterations * st.cost.step_seconds(0, decode_requests,
                                                                     decode_context)
        self.decode.complete(decode_tokens)
        return decode_requests

    def _report(self, start: float, prefill_tokens: int, decode_requests: int, *,
                idle: bool = False, steps: int = 1,
                first: tuple[float, int, int] | None = None, loaded: int = 0) -> StepReport:
        st = self._st
        return StepReport(clock_s=st.clock_s, advanced_s=st.clock_s - start,
                          prefill_tokens=prefill_tokens, decode_requests=decode_requests,
                          finished=tuple(st.finished), idle=idle, steps=steps, first=first,
                          loaded_tokens=loaded,
                          free_tokens=st.sg.allocator.available_size(),
                          evictable_tokens=st.sg.tree_cache.evictable_size())

    def _decode_jump(self, clocks: list[float], start: float, *,
                     first: tuple[float, int, int] | None = None) -> StepReport:
        """len(clocks) decode-only steps in one allocation (DirectDecode.advance); the
        new_token_ratio decays once per step, as update_running_batch's would."""
        st, finished_before = self._st, self._st.counters.requests_finished
        decode_requests = self.decode.advance(clocks)
        for _ in clocks:
            self.prefill.admission.ratio.decay_step()
        if st.counters.requests_finished != finished_before:
            self.prefill.admission.on_batch_shrunk()
        st.counters.steps += len(clocks)
        self._rollbacks_in_a_row = 0
        return self._report(start, 0, decode_requests, steps=len(clocks), first=first)

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

    def _jump_to_next_event(self) -> bool:
        """Advance the idle clock to the next arrival or reload completion."""
        st = self._st
        events = [t.reload_ready_s for t in st.reloading]
        if st.future:
            events.append(st.future[0][0])
        later = [e for e in events if e > st.clock_s]
        if not later:
            if st.reloading:
                self.retention.complete_reloads()
                return True
            return False
        st.clock_s = min(later)
        self.retention.complete_reloads()
        return True

    def _resolve_stall(self) -> None:
        """Nothing could run this step. In order: wait for an in-flight reload (it will
        run), demote the oldest retention lease (a paused session yields to active work),
        preempt the newest partially prefilled request (its published chunks stay cached),
        wait for the next arrival; otherwise the workload cannot be served."""
        st = self._st
        if st.reloading:
            self._jump_to_next_event()
        elif self.retention.revoke_oldest_lease():
            return
        elif st.partial and (len(st.partial) > 1 or st.waiting):
            self.retention.retract(st.partial.pop())
        elif st.future and not st.partial:
            self._jump_to_next_event()
        else:
            self._fail_unservable()

    def _fail_unservable(self) -> None:
        waiting = self._st.waiting[0].spec.rid if self._st.waiting else "?"
        raise IntegrityError(
            f"scheduler stalled: request {waiting} cannot be admitted and nothing runs "
            f"({self._st.sg.allocator.available_size()} free, "
            f"{self._st.sg.tree_cache.evictable_size()} evictable, "
            f"{self._st.sg.tree_cache.protected_size()} protected tokens)"
        )

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
        st = self._st
        if st.waiting or st.partial or st.running:
            return st.clock_s
        events = [t.reload_ready_s for t in st.reloading]
        if st.future:
            events.append(st.future[0][0])
        return max(min(events), st.clock_s) if events else None

    def wait_until(self, to_s: float) -> StepReport:
        """Advance an idle engine's clock to `to_s` (not past its next event) without running
        anything: a paced runner waiting in wall time for the next arrival instead of
        jumping to it. Returns a report of that wait (`steps` 0)."""
        st = self._st
        event = self.next_event_s()
        if to_s < st.clock_s or (event is not None and (event <= st.clock_s or to_s > event)):
            raise IntegrityError(
                f"wait_until({to_s}): the clock is at {st.clock_s} and the next event at "
                f"{event} (an engine waits forward, idle, and never past its next event)")
        start, st.clock_s = st.clock_s, to_s
        st.finished = []
        return self._report(start, 0, 0, steps=0)

"""Prefill admission through SGLang's own scheduling classes ("what fits").

Each prefill round is SGLang 0.5.23's `Scheduler._get_new_batch_prefill_raw`
(srt/managers/scheduler.py) with the same collaborators, called, not re-implemented:

    SchedulePolicy.calc_priority    orders the waiting queue (fcfs, lpm, dfs-weight, ...)
                                    and touches waiting prefixes (LRU refresh, every 32nd
                                    round under fcfs + lru, SGLANG_ENABLE_WAITING_PREFIX_REFRESH)
    PrefillAdder                    add_chunked_req for the chunk in progress, then
                                    add_one_req per waiting request in queue order, under
                                    rem_total_tokens (free + evictable - the running requests'
                                    remaining max_new_tokens), --chunked-prefill-size and
                                    --max-prefill-tokens; it locks each admitted prefix
    NewTokenRatioTracker            the new_token_ratio the adder reserves with (decayed
                                    each decode step, reset from retract_decode)

Only the glue of that method is mirrored here (SGLang keeps it inside `Scheduler`, whose
constructor needs a model worker): the early returns on `batch_is_full` and
`get_num_allocatable_reqs`, the loop's breaks, and `batch_is_full` after NO_TOKEN.
kvctl's own mechanisms enter the loop only when configured: namespace authorization (a
request that may not read a namespace matches nothing), the tau_high ceiling
(`EngineConfig.tau_high`, off by default) and host-tier reloads (`host_capacity_tokens`).
With SGLang's HiCache on (`hicache_ratio`), `add_one_req` itself loads a host hit back
(`init_load_back`; engine_adapter/embedded/hicache.py lists the calls around it).

Nothing here allocates K/V (allocation.py does, and rolls an admission back when SGLang's
allocator is short).
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Iterable, NamedTuple

from engine_adapter.embedded.requests import RequestState, Tracked
from engine_adapter.embedded.state import EngineState
from engine_adapter.instrument.funnel_recorder import AdmissionFacts
from engine_adapter.base.errors import InputError
from engine_adapter.base.pages import page_ceil, page_floor


def namespace_label(namespace: str, salt: str) -> str:
    """Low-cardinality label for a namespace: never the raw tenant string, and salted so
    a guessable tenant name cannot be recovered from it (seed 000 0x0CE). The label is
    also the SGLang `cache_salt`, so it partitions the radix tree."""
    return "ns-" + hashlib.sha256(f"{salt}\0{namespace}".encode()).hexdigest()[:12]


class Selection(NamedTuple):
    """This step's prefill work, in batch order. `origins[i]`: "partial" (a continuation,
    which keeps its row) or "waiting" (newly admitted: matched, locked, sized)."""

    chosen: list[Tracked]
    origins: list[str]
    computed_tokens: int  # tokens the modeled forward computes (a reload span computes none)


class RunningView:
    """What SGLang's scheduling classes read of the running `ScheduleBatch`: its `reqs`
    (PrefillAdder's reservation, routing-key's counts) and `batch_size()`."""

    __slots__ = ("reqs",)

    def __init__(self, reqs: list) -> None:
        self.reqs = reqs

    def batch_size(self) -> int:
        return len(self.reqs)


class LazyQueue:
    """The waiting queue as fcfs `calc_priority` reads it: its length, and a slice of it
    as labelled `Req`s (built on that first read, as admission would build them)."""

    __slots__ = ("_waiting", "_label")

    def __init__(self, waiting, label) -> None:
        self._waiting = waiting
        self._label = label

    def __len__(self) -> int:
        return len(self._waiting)

    def __iter__(self):  # every Req, built: only a reader that wants them all pays
        return iter(self[:len(self)])

    def __getitem__(self, index: slice | int):
        if isinstance(index, int):
            return self[index:index + 1 or None][0]
        if index.start is None and index.step is None and index.stop is not None:
            picked = list(itertools.islice(self._waiting, index.stop))  # queue[:N]
        else:
            picked = list(self._waiting)[index]
        for tr in picked:
            self._label(tr)
        return [tr.req for tr in picked]


class Admission:
    """One SGLang prefill round per call to `select`.

    Mutates the queues (pops what it admits from `partial` and `waiting`; a cache-aware
    policy reorders `waiting` as SGLang's sorts its waiting_queue), each admitted `Req`
    (prefix, extend_end, cache salt, its tree lock: PrefillAdder's), `Tracked` (state,
    key, admission facts), the deferral counter, and `batch_is_full` (SGLang's
    `running_batch.batch_is_full`). Raises InputError for a policy SGLang refuses."""

    def __init__(self, st: EngineState, retention) -> None:
        from sglang.srt.managers.schedule_policy import SchedulePolicy
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
            NewTokenRatioTracker,
        )

        self.st = st
        self.retention = retention
        try:  # scheduler.py init_schedule_policy (HiCache when configured, no priorities)
            self.policy = SchedulePolicy(st.config.schedule_policy, st.sg.tree_cache,
                                         st.config.hicache_ratio is not None, False, False)
        except ValueError as err:
            raise InputError(f"SGLang refuses --schedule-policy "
                             f"{st.config.schedule_policy}: {err}") from None
        from sglang.srt.managers.schedule_policy import PrefillAdder

        self.adder_class = PrefillAdder  # scheduler.py get_prefill_adder_class
        self.ratio = NewTokenRatioTracker.from_config()
        self.batch_is_full = False
        self.processed_tokens = 0  # scheduler.processed_tokens_counter (HRRN's aging)

    def prefill_wanted(self) -> bool:
        """`_get_new_batch_prefill_raw`'s first early return: no round while the batch is
        full or nothing waits, unless a chunk is in progress."""
        st = self.st
        return bool(st.partial) or (bool(st.waiting) and not self.batch_is_full)

    def _allocatable(self, running_bs: int, held_rows: int) -> int:
        """scheduler.py get_num_allocatable_reqs: pp_max_micro_batch_size (= max running
        at PP 1) minus the running batch, and the free request rows plus those held."""
        rows = self.st.sg.req_to_token_pool.available_size() + held_rows
        return min(self.st.config.max_running_requests - running_bs, max(rows, 0))

    def _running_reqs(self) -> list:
        """The running `Req`s in batch order. On the direct path the decode batch's view
        (batch_view.py) already holds them, kept from the batch's changes: refreshing it
        costs the changes since the last step, not a walk over ~240 running requests per
        round. Read-only for the round (PrefillAdder and calc_priority only read it)."""
        view = self.st.batch_view
        if view is None:
            return [t.req for t in self.st.running.values()]
        view.refresh(self.st.running)
        return view.reqs

    def select(self) -> Selection:
        """One prefill round (module docstring); empty when SGLang would run none."""
        from sglang.srt.managers.schedule_policy import AddReqResult

        st = self.st
        chosen: list[Tracked] = []
        origins: list[str] = []
        if not st.running:
            self.batch_is_full = False
        if not self.prefill_wanted():
            return Selection(chosen, origins, 0)
        running = RunningView(self._running_reqs())
        running_bs = len(running.reqs)
        if not st.partial and self._allocatable(running_bs, 0) <= 0:
            self.batch_is_full = True
            return Selection(chosen, origins, 0)
        queue = self._order_waiting(running)
        tree = st.sg.tree_cache
        adder = self.adder_class(st.config.page_size, tree, st.sg.allocator, running,
                             self.ratio.current, st.config.max_prefill_tokens,
                             st.config.token_budget, 0, 0,
                             max_running_requests=st.config.max_running_requests)
        for tr in list(st.partial):  # the chunk in progress (and completed reloads)
            req = tr.req
            req.init_next_round_input()
            adder.add_chunked_req(req)
            if not adder.can_run_list or adder.can_run_list[-1] is not req:
                break
            st.partial.remove(tr)
            chosen.append(tr)
            origins.append("partial")
        computed = sum(t.req.extend_len for t in chosen)
        for tr in queue:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            held = sum(r.kv.holds_kv for r in adder.can_run_list)
            reloads = sum(t.state == RequestState.RELOADING for t in chosen)  # not the adder's
            if len(adder.can_run_list) + reloads >= self._allocatable(running_bs, held):
                self.batch_is_full = True
                break
            tokens, verdict = self._admit(tr, adder)
            if tokens is not None:
                chosen.append(tr)
                origins.append("waiting")
                computed += tokens
            if verdict != AddReqResult.CONTINUE:
                if verdict == AddReqResult.NO_TOKEN:
                    self.batch_is_full = bool(adder.can_run_list) or bool(running.reqs)
                break
        # the loop stops at the first refusal, so the admitted are the queue's head, in order
        # (scheduler.py: waiting_queue = [x for x in waiting_queue if x not in can_run_set])
        for _ in range(origins.count("waiting")):
            st.waiting.popleft()
        self.processed_tokens += computed
        return Selection(chosen, origins, computed)

    def _order_waiting(self, running: RunningView) -> Iterable[Tracked]:
        """SchedulePolicy.calc_priority on the waiting `Req`s (labelled first, so their
        radix keys are the ones admission will match); `st.waiting` takes its order.

        Under fcfs the policy neither sorts nor matches (the trees kvctl builds do not
        support fast matching); it reads only the queue's length and, on a refresh round,
        its first WAITING_QUEUE_PREFIX_MATCH_MAX requests. It gets a `LazyQueue` then, so a
        long queue keeps holding specs, not `Req`s (requests.py `Tracked`)."""
        st = self.st
        if self.policy.policy.value == "fcfs" and not self.policy.enable_priority_scheduling:
            self.policy.calc_priority(LazyQueue(st.waiting, self._label), running,
                                      processed_tokens=self.processed_tokens)
            return st.waiting  # read in order, not copied: the round stops at its first refusal
        for tr in st.waiting:
            self._label(tr)
        reqs = [t.req for t in st.waiting]
        before = [id(r) for r in reqs]
        self.policy.calc_priority(reqs, running, processed_tokens=self.processed_tokens)
        if [id(r) for r in reqs] != before:
            by_req = {id(t.req): t for t in st.waiting}
            st.waiting = type(st.waiting)(by_req[id(r)] for r in reqs)
        return list(st.waiting)

    def _label(self, tr: Tracked) -> bool:
        """Set the namespace label, generation key, cache salt and extra key a request
        matches under; returns whether its tenant may read the namespace it asks for."""
        st, spec, req = self.st, tr.spec, tr.req
        namespace = spec.read_namespace
        authorized = (namespace == spec.tenant
                      or namespace in st.config.authorized.get(spec.tenant, ()))
        tr.namespace_label = namespace_label(namespace if authorized else spec.tenant,
                                             st.namespace_salt)
        tr.generation = st.generation
        tr.key = (tr.namespace_label, st.generation)
        req.cache_salt = tr.namespace_label
        req.extra_key = f"gen{st.generation}"
        return authorized

    def _admit(self, tr: Tracked, adder) -> tuple[int | None, object]:
        """Match and offer one waiting request to the adder (scheduler.py: init_next_round_input,
        then add_one_req). Returns (tokens it computes, or None when refused; the adder's
        verdict for the next candidate, an AddReqResult)."""
        from sglang.srt.managers import schedule_policy
        from sglang.srt.managers.schedule_policy import AddReqResult

        st, req = self.st, tr.req
        tree = st.sg.tree_cache
        authorized = self._label(tr)
        if authorized:
            req.init_next_round_input(tree)
        else:  # refused before the tree is consulted: no lookup at all
            req.init_next_round_input(None)
            req.prefix_len = 0
            req.last_node = tree.root_node_handle(req.extra_key)
            req.kv.cache_protected_len = 0
        fill = req.full_untruncated_fill_ids
        s_cap = max(len(fill) - 1, 0)
        if self._over_ceiling(req, len(fill), adder.can_run_list):
            return None, AddReqResult.OTHER  # kvctl's ceiling: retried next round
        host = self.retention.host_plan(tr, s_cap) if authorized else None
        if host is not None and host.reload:  # kvctl's host tier: allocate the span only
            # charged to the adder's budget as SGLang charges an admission (reserve: the
            # paged span, a page, and the outputs still to come), so later candidates see it
            # add_one_req's terms: outputs clipped to CLIP_MAX_NEW_TOKENS, and the budget
            # read with the matched prefix pinned (its _lock_node), so a prefix this reload
            # locks is not also counted as evictable room for it
            span = host.end - req.prefix_len
            outputs = min(max(req.sampling_params.max_new_tokens - len(req.output_ids), 0),
                          schedule_policy.CLIP_MAX_NEW_TOKENS)
            lock = tree.lock(req.last_node)
            if page_ceil(span, st.config.page_size) + st.config.page_size + outputs \
                    >= adder.rem_total_tokens:
                tree.unlock(lock)
                return None, AddReqResult.NO_TOKEN
            adder.memory_budget.reserve(span, outputs)
            req.lock = lock
            req.extend_end = host.end
            tr.state = RequestState.RELOADING
            tr.reload_required_end = host.end
            tr.reload_tokens = host.end - req.prefix_len
            self._facts(tr, authorized, s_cap, host)
            return 0, AddReqResult.CONTINUE
        verdict = adder.add_one_req(req, has_chunked_req=bool(st.partial),
                                    truncation_align_size=None)
        if not adder.can_run_list or adder.can_run_list[-1] is not req:
            return None, verdict
        tr.state = RequestState.PREFILL
        self._facts(tr, authorized, s_cap, host)
        return req.extend_len, verdict

    def _over_ceiling(self, req, prompt: int, chosen: list) -> bool:
        """kvctl's tau_high (seed 003, off unless configured): defer a new admission that
        would push non-reclaimable use (SGLang's token_usage) above the ceiling while
        other requests run or were admitted this round."""
        st = self.st
        tau = st.config.tau_high
        if tau is None or not (st.running or st.partial or st.reloading or chosen):
            return False
        page = st.config.page_size
        pool = st.sg.allocator.size
        need = page_ceil(prompt, page) - page_floor(req.prefix_len, page)
        pending = sum(page_ceil(r.extend_end, page) - page_floor(r.prefix_len, page)
                      for r in chosen)
        locked = pool - st.sg.allocator.available_size() - st.sg.tree_cache.evictable_size()
        if (locked + pending + need) / pool > tau:
            st.counters.admission_deferrals += 1
            return True
        return False

    def _facts(self, tr: Tracked, authorized: bool, s_cap: int, host) -> None:
        st, req, spec = self.st, tr.req, tr.spec
        tr.admitted_s = st.clock_s if tr.admitted_s is None else tr.admitted_s
        if tr.funnel_done:
            return
        fill = req.full_untruncated_fill_ids
        s_any, s_ns, s_sem = (st.oracle.lengths(tr.key, fill, s_cap, chain=tr.chain)
                              if authorized else (0, 0, 0))
        tr.facts = AdmissionFacts(
            s_prompt=len(spec.tokens), s_cap=s_cap, authorized=authorized,
            s_any=s_any, s_ns=s_ns, s_sem=s_sem,
            s_indexed=req.prefix_len + (host.end - req.prefix_len if host else 0),
            leased=True, mapped=host is None or host.reload, snapshot_current=True,
            s_runtime=req.prefix_len,
        )

    # ---- SGLang's update_running_batch and filter_batch bookkeeping ----------------------

    def before_decode(self, decode_steps: int, retract_ratio: float | None) -> None:
        """scheduler.py update_running_batch, before its prepare_for_decode (so before the
        decode batch runs): after a retraction the ratio is retract_decode's estimate
        (`retract_ratio`) and the batch is no longer full; else the ratio decays once per
        decode step (`decode_steps`: a jump's several). Called by decode.py."""
        if retract_ratio is not None:
            self.ratio.current = retract_ratio
            self.batch_is_full = False
        else:
            for _ in range(decode_steps):
                self.ratio.decay_step()

    def after_step(self, shrunk: bool) -> None:
        """Once per step, after its result: `shrunk`, a request left the running batch
        (finish, abort, a prefill member that does not decode next), so the next
        get_next_batch_to_run's filter_batch clears batch_is_full before its prefill round."""
        if shrunk:
            self.batch_is_full = False

"""Prefill: kvctl's scheduler step around SGLang's helpers, in three parts.

    admission.py    what fits: SGLang's SchedulePolicy and PrefillAdder, one prefill
                    round as Scheduler._get_new_batch_prefill_raw runs it
    allocation.py   who owns memory: SGLang's paged allocation, direct or through a
                    `ScheduleBatch`; SGLang's out-of-memory error rolls the admission back
    completion.py   after the modeled forward: publish chunks, first tokens, reloads

`Prefill` strings them together for the engine's step; with a fault check running it
digests the state around each admission so a rollback can prove it changed nothing.
"""

from __future__ import annotations

from array import array

import numpy as np

from engine_adapter.embedded.admission import Admission, namespace_label
from engine_adapter.embedded.allocation import Allocation, PrefillPlan, state_digest
from engine_adapter.embedded.completion import Completion
from engine_adapter.embedded.requests import RequestSpec
from engine_adapter.embedded.state import EngineState, RollbackDigests

__all__ = ["OUTPUT_VOCAB", "Prefill", "build_req", "PrefillPlan", "namespace_label", "state_digest", "to_token_array"]


class Prefill:
    """Admission, allocation and completion of one step's prefill work.

    `schedule` picks and allocates (mutating queues, locks, SGLang's allocator and tree;
    on a failed allocation it records `st.last_rollback` and returns an unallocated plan);
    `complete` settles the plan after the forward. `cache`: the direct cache path, or None
    for SGLang's ScheduleBatch path (forward passes, the test oracle)."""

    def __init__(self, st: EngineState, retention, cache=None) -> None:
        self.st = st
        self.retention = retention
        self.admission = Admission(st, retention)
        self.allocation = Allocation(st, cache)
        self.completion = Completion(st, retention)

    def schedule(self) -> PrefillPlan:
        """Pick and allocate this step's prefill work. Mutates queues, locks, allocator."""
        st = self.st
        plan = PrefillPlan()
        before = state_digest(st) if st.digest_admissions else None
        chosen, origins, plan.computed_tokens = self.admission.select()
        if chosen:
            plan.allocated = self.allocation.allocate(plan, chosen, origins)
            if not plan.allocated:
                plan.computed_tokens = 0
                st.last_rollback = RollbackDigests(before, state_digest(st) if st.digest_admissions else None)
                st.last_rollback_step = st.counters.steps
            else:
                plan.members = chosen
                for tr, origin in zip(chosen, origins):
                    if origin == "waiting":
                        self.retention.on_admit(tr)
        return plan

    def complete(self, plan: PrefillPlan, tokens: dict[str, int] | None = None) -> None:
        """See `Completion.complete`."""
        self.completion.complete(plan, tokens)


def to_token_array(tokens: np.ndarray) -> array:
    """int64 tokens (numpy, or a `BlockPrompt` expanded here) to the `array('q')` SGLang's
    Req expects: one copy, from the array's buffer (no intermediate `bytes`)."""
    out = array("q")
    out.frombytes(memoryview(np.ascontiguousarray(tokens, dtype="<i8")).cast("B"))
    return out


OUTPUT_VOCAB = 1 << 31  # synthetic ids live in [2^30, 2^31): below SGLang's uint32 hashing


def build_req(spec: RequestSpec):
    """SGLang's `Req` for `spec`, as the scheduler builds one for a tokenized request:
    greedy, `ignore_eos`, no stop ids (`Tracked.make_req`, called at first use)."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    sampling = SamplingParams(max_new_tokens=spec.max_new_tokens, temperature=0, ignore_eos=True)
    sampling.normalize(None)
    return Req(spec.rid, "", to_token_array(spec.tokens), sampling, vocab_size=OUTPUT_VOCAB,
               eos_token_ids=set(), priority=spec.priority)

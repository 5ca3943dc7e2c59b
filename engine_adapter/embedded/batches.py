"""The batch of one engine step: chosen in SGLang's order, run, completed.

`next_batch` is SGLang 0.5.23's `Scheduler.get_next_batch_to_run` (srt/managers/
scheduler.py) with kvctl's decode jumps folded in (jumps.py); it returns the one batch the
step runs:

    1. prefill   a prefill round (admission.py) whose batch was allocated: SGLang runs it
                 first, decode waits a step
    2. jump      k decode steps at once (direct decode cache only, jumps.py), when the
                 next steps can only decode and either no round was wanted (the whole
                 step is decode) or the round admitted nothing, undid nothing, and the
                 caller's `merge_check` accepts a merged report (its decode step is the
                 jump's first, `Batch.first`)
    3. decode    one decode step of the running batch (decode.py: retract if short,
                 prepare_for_decode)
    4. none      nothing to run (the engine's stall handling decides, stalls.py)

`run` is the forward: the tiny model when one runs, and the cost model's clock (a jump's
clocks were priced when it was planned). `complete` is `process_batch_result`: first
tokens and published chunks of a prefill, output tokens and finishes of a decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from engine_adapter.embedded.allocation import PrefillPlan
from engine_adapter.embedded.decode import Decode, DecodeStep
from engine_adapter.embedded.jumps import JumpPlanner
from engine_adapter.embedded.prefill import Prefill
from engine_adapter.embedded.state import EngineState

NO_DECODE = DecodeStep(0, 0, None)


@dataclass(frozen=True)
class Batch:
    """What one step runs. `kind`: "jump", "prefill", "decode" or "none". `plan`: the
    step's prefill plan (unallocated unless `kind` is "prefill"); `decode`: the decode
    step prepared (its `requests` 0 when the retraction emptied the batch); `clocks`: a
    jump's end-of-step clocks; `first`: the end state of a merged jump's first step."""

    kind: Literal["prefill", "decode", "jump", "none"]
    plan: PrefillPlan = field(default_factory=PrefillPlan)
    decode: DecodeStep = NO_DECODE
    clocks: list[float] = field(default_factory=list)
    first: tuple[float, int, int] | None = None

    @property
    def steps(self) -> int:
        """Scheduling steps this batch stands for (a jump: several)."""
        return len(self.clocks) if self.kind == "jump" else 1

    @property
    def ran(self) -> bool:
        """Whether anything ran: a prefill, a jump, or a decode step with requests left."""
        return self.kind in ("prefill", "jump") or self.decode.requests > 0


class Batches:
    """Chooses, runs and completes each step's batch; see module docstring. Mutates what
    the prefill, decode and jump pieces mutate, and the virtual clock (`run`)."""

    def __init__(self, st: EngineState, prefill: Prefill, decode: Decode, jumps: JumpPlanner,
                 model=None) -> None:
        self.st = st
        self.prefill = prefill
        self.decode = decode
        self.jumps = jumps
        self.model = model  # ModelRunner (the tiny model's forward), or None

    def next_batch(self, start_s: float, horizon_s: float | None,
                   merge_check: Callable[[float, float], bool] | None) -> Batch:
        """The step's batch, in the order of the module docstring. Allocates it (and
        retracts for it); `horizon_s`: no jump runs past it."""
        st = self.st
        round_wanted = self.prefill.admission.prefill_wanted()
        plan = self.prefill.schedule()  # SGLang's prefill round (admission.py)
        if plan.allocated:
            return Batch("prefill", plan)
        if not round_wanted or (merge_check is not None
                                and st.last_rollback_step != st.counters.steps):
            clocks = self.jumps.clocks(horizon_s)
            if clocks and not round_wanted:  # the whole step is decode: a plain jump
                return self._jump(clocks, plan)
            if clocks and merge_check(start_s, clocks[0]):  # the round's decode step starts it
                return self._jump(clocks, plan, first=self.jumps.first_state(clocks))
        if st.running:
            return Batch("decode", plan, self.decode.prepare())
        return Batch("none", plan)

    def _jump(self, clocks: list[float], plan: PrefillPlan, *,
              first: tuple[float, int, int] | None = None) -> Batch:
        requests = self.decode.prepare_jump(len(clocks))
        return Batch("jump", plan, DecodeStep(requests, 0, None), clocks, first)

    def run(self, batch: Batch):
        """The forward: the tiny model's tokens (None without one), the clock advanced by
        the step's modeled cost."""
        st, model, tokens = self.st, self.model, None
        if batch.kind == "prefill":
            plan = batch.plan
            if model is not None and plan.batch is not None:
                tokens = model.prefill(plan.batch, plan.members)
            st.clock_s += st.cost.step_seconds(plan.computed_tokens, 0, 0, plan.members,
                                               loaded_tokens=plan.loaded_tokens)  # HiCache's
        elif batch.kind == "decode" and batch.decode.requests:
            if model is not None:
                tokens = model.decode(st.running_batch)
            st.clock_s += st.cost.step_seconds(0, batch.decode.requests, batch.decode.context)
        elif batch.kind == "jump":
            st.clock_s = batch.clocks[-1]  # priced step by step when planned (jumps.py)
        return tokens

    def complete(self, batch: Batch, tokens) -> bool:
        """After the forward (`tokens`: the model's, or None); returns whether a prefill
        member left the batch it joined (finished, or a chunk that continues), which
        SGLang's filter_batch of that batch would report."""
        st = self.st
        if batch.kind == "prefill":
            self.prefill.complete(batch.plan, tokens)
            return any(st.running.get(t.req.rid) is not t for t in batch.plan.members)
        if batch.kind == "decode" and batch.decode.requests:
            self.decode.complete((st.clock_s,), tokens)
        elif batch.kind == "jump":
            self.decode.complete(batch.clocks)
        return False

"""The fleet loop: N replicas on one virtual clock behind a routing policy.

Each replica is an unchanged `EmbeddedEngine` (SGLang's scheduler classes and cache, its
own cost model); the loop owns the arrivals and the order in which replicas step:

    for each arrival (time order), at t = its arrival time:
        advance: while some replica has work and its clock < t:
                     step the replica whose clock is earliest (horizon t: a decode jump
                     stops at t; a single step may end past t, as a real step does)
                     its finished requests -> completions heap (finish time)
                     its KV events -> the policy's directory / the exact directory
        completions with finish time <= t: the router's load counts drop, on_complete
        policy.tick(t); j = policy.select(request, view)     (view: loads at t)
        replica j gets the request, arriving at t
    drain: step every replica, earliest clock first, until none has work

The router therefore decides from what it could know at t: its own counts (requests it
routed whose response had finished by t), its own tree or directory. A replica whose last
step ran past t has already applied that step's cache changes; a real router's KV events
lag by at least one step as well, so a directory policy sees no more than a real one.
Mutates only the engines it is given and the policy.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from kvctl.fleet.directory import PrefixDirectory
from kvctl.fleet.routers.base import RouteRequest, RouterPolicy

STILL_STEPS = 10_000  # steps in a row that change nothing before a replica counts as stuck


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One request as the fleet served it (times on the virtual clock, seconds)."""

    rid: str
    replica: int
    arrival_s: float
    prompt_tokens: int
    hit_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    finish_s: float | None = None
    rejected: str | None = None


class FleetLoop:
    """See module docstring. `engines`: the replicas; `page_size`: theirs (the exact view)."""

    def __init__(self, engines: list, policy: RouterPolicy, *, page_size: int,
                 on_progress: Callable[[int, float], None] | None = None) -> None:
        self.engines = engines
        self.policy = policy
        self.page_size = page_size
        self.exact = (PrefixDirectory(len(engines), page_size)
                      if policy.reads_exact_caches else None)
        self._events = policy.wants_kv_events or self.exact is not None
        self._inflight = [0] * len(engines)
        self._completions: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self._arrivals: dict[str, tuple[int, float, int]] = {}  # rid -> replica, t, prompt
        self.outcomes: list[Outcome] = []
        self.steps = [0] * len(engines)
        self._still = [0] * len(engines)
        self.routed = 0
        self.on_progress = on_progress

    # ---- FleetView ---------------------------------------------------------------------

    @property
    def replicas(self) -> int:
        return len(self.engines)

    def loads(self) -> list[int]:
        return list(self._inflight)

    def healthy(self) -> list[bool]:
        return [True] * len(self.engines)

    def exact_hits(self, request: RouteRequest) -> list[int]:
        """Per replica, the page-aligned prefix its cache holds now. SGLang matches at most
        the prompt less its last token (one token must be computed: Req.init_next_round_input)."""
        tokens = np.asarray(request.tokens)[: max(request.prompt_tokens - 1, 0)]
        return self.exact.match(self.exact.chunk_hashes(tokens))

    # ---- the loop ----------------------------------------------------------------------

    def run(self, arrivals: Iterable[tuple]) -> list[Outcome]:
        """Route and serve every (request, RequestSpec[, refused]) in arrival order; returns
        outcomes in completion order. `refused`: why the picked replica's server refuses the
        request at its door (the router routed it all the same: its counter moved, its tree
        learnt the text), or None; a refused request never reaches the engine."""
        for request, spec, *rest in arrivals:
            refused = rest[0] if rest else None
            t = request.arrival_s
            self._advance(t)
            self._complete_until(t)
            self.policy.tick(t)
            j = self.policy.select(request, self)
            if not 0 <= j < len(self.engines):
                raise RuntimeError(f"router {self.policy.name} picked replica {j} of "
                                   f"{len(self.engines)}")
            self._inflight[j] += 1
            self._arrivals[spec.rid] = (j, t, request.prompt_tokens)
            if refused is not None:  # the server answers an error at once
                self._refused(j, spec.rid, t, refused)
                continue
            self.engines[j].submit(spec)
            self.routed += 1
            if self.on_progress is not None:
                self.on_progress(self.routed, t)
        self._advance(math.inf)
        self._complete_until(math.inf)
        return self.outcomes

    def _advance(self, t: float) -> None:
        engines = self.engines
        while True:
            best, best_clock = -1, t
            for i, engine in enumerate(engines):
                if engine.has_work():
                    clock = engine.clock_s
                    if clock < best_clock:
                        best, best_clock = i, clock
            if best < 0:
                return
            self._step(best, None if math.isinf(t) else t)

    def _step(self, i: int, horizon: float | None) -> None:
        engine = self.engines[i]
        report = engine.step(horizon_s=horizon)
        self.steps[i] += report.steps
        for record in report.finished:
            self._finished(i, record)
        if self._events:
            events = engine.take_kv_events()
            if events:
                if self.exact is not None:
                    self.exact.apply(i, events)
                if self.policy.wants_kv_events:
                    self.policy.on_kv_events(i, events)
        if report.advanced_s > 0 or report.finished or report.prefill_tokens \
                or report.decode_requests:
            self._still[i] = 0
        else:  # a step that did nothing: the engine resolves stalls; a loop here is a bug
            self._still[i] += 1
            if self._still[i] > STILL_STEPS:
                raise RuntimeError(f"replica {i} made no progress in {STILL_STEPS} steps at "
                                   f"{engine.clock_s:.3f} s with work left")

    def _finished(self, i: int, record) -> None:
        replica, arrival, prompt = self._arrivals.pop(record.rid)
        if record.rejected is not None:
            outcome = Outcome(rid=record.rid, replica=replica, arrival_s=arrival,
                              prompt_tokens=prompt, rejected=record.rejected,
                              finish_s=record.finish_s)
        else:
            outcome = Outcome(rid=record.rid, replica=replica, arrival_s=arrival,
                              prompt_tokens=record.prompt_tokens, hit_tokens=record.hit_tokens,
                              ttft_s=record.ttft_s, e2e_s=record.finish_s - arrival,
                              finish_s=record.finish_s)
        self.outcomes.append(outcome)
        self._seq += 1
        heapq.heappush(self._completions, (max(record.finish_s, arrival), self._seq, i,
                                           record.rid))

    def _refused(self, i: int, rid: str, t: float, reason: str) -> None:
        _, arrival, prompt = self._arrivals.pop(rid)
        self.outcomes.append(Outcome(rid=rid, replica=i, arrival_s=arrival,
                                     prompt_tokens=prompt, rejected=reason, finish_s=t))
        self._seq += 1
        heapq.heappush(self._completions, (t, self._seq, i, rid))
        self.routed += 1

    def _complete_until(self, t: float) -> None:
        heap = self._completions
        while heap and heap[0][0] <= t:
            finish, _, i, rid = heapq.heappop(heap)
            self._inflight[i] -= 1
            self.policy.on_complete(i, rid, finish)

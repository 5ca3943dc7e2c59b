"""What the plugin counts on every scheduler step: cheap, O(batch), no tree access.

SGLang calls the plugin's hooks with the objects it is processing; this file turns them into
monotone totals and the part of the prefix-hit funnel a real scheduler can observe without
kvctl's content oracle (seed 000 0x0CF, 0x07A)::

    requests       every request admitted to a prefill (prompt tokens, S_cap = S_prompt - 1)
    executed_hits  requests that reused a prefix (SGLang's `Req.cached_tokens` > 0)
    everything between: None (authorization, candidates, compatibility, generation,
                        leases and mapping need the content oracle or host-tier facts)

A request is recorded once, at the first processed extend batch that contains it (SGLang
computes `cached_tokens` once, on the first chunk; a retracted request keeps it), and its
finish is counted once. The marks live on the `Req` itself, so nothing here grows with the
number of requests ever served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine_adapter.funnel import (
    REJECTION_REASONS,
    STAGES,
    Funnel,
    FunnelStage,
    PrefixLengths,
    Rejection,
)
from engine_adapter.snapshot import Counters

_ADMITTED = "_kvctl_admitted"
_FINISHED = "_kvctl_finished"

# Counters a scheduler plugin cannot count: SGLang's own /metrics has most of them.
UNOBSERVED = ("allocation_failures", "admission_deferrals", "retractions", "retracted_tokens",
              "offload_bytes", "reload_bytes", "offloaded_tokens", "reloaded_tokens",
              "mapping_stalls", "mapping_stall_seconds", "kv_events")


class StepTally:
    """Mutable totals, fed from the scheduler thread only."""

    def __init__(self, on_admit: Callable[[Any, int], None] | None = None,
                 on_finish: Callable[[Any], None] | None = None) -> None:
        """on_admit(req, hit_tokens): called once per admitted request (receipts);
        on_finish(req): once per finished request (the what-if shadow)."""
        self.on_admit = on_admit
        self.on_finish = on_finish
        self.steps = 0
        self.arrivals = 0
        self.finished = 0
        self.decode_tokens = 0
        self.evictions = 0
        self.evicted_tokens = 0
        self.locked_eviction_rejects = 0
        self.admitted = 0
        self.prompt_tokens = 0
        self.cap_tokens = 0
        self.hit_requests = 0
        self.hit_tokens = 0
        self.hit_cap_tokens = 0  # executed_hits stage tokens: min(hit, S_cap) per request

    def on_arrival(self, is_retracted: bool) -> None:
        if not is_retracted:  # a retracted request re-enters the queue; it arrived before
            self.arrivals += 1

    def on_batch(self, batch: Any) -> None:
        """One processed batch (`Scheduler.process_batch_result`). Runs every step: decode
        (the common case) is one length and one attribute read per request."""
        self.steps += 1
        reqs = batch.reqs
        if not reqs:  # nothing to count (an idle batch): skip the mode checks
            return
        mode = batch.forward_mode
        if mode.is_decode():
            self.decode_tokens += len(reqs)
        elif mode.is_extend():
            for req in reqs:
                if _ADMITTED not in req.__dict__:
                    req.__dict__[_ADMITTED] = True
                    self._admit(req)
        for req in reqs:
            if req.finished_reason is not None and _FINISHED not in req.__dict__:
                req.__dict__[_FINISHED] = True
                self.finished += 1
                if self.on_finish is not None:
                    self.on_finish(req)

    def on_evict(self, requested: int, evicted: int, protected_after: int) -> None:
        """The eviction probe's callback (instrument/probes.py)."""
        if evicted:
            self.evictions += 1
            self.evicted_tokens += evicted
        if evicted < requested and protected_after > 0:
            self.locked_eviction_rejects += 1

    def _admit(self, req: Any) -> None:
        prompt = len(req.origin_input_ids)
        cap = max(prompt - 1, 0)  # seed 000 0x07A: S_cap = S_prompt - 1 for logits
        hit = min(int(req.cached_tokens), cap)
        self.admitted += 1
        self.prompt_tokens += prompt
        self.cap_tokens += cap
        if hit > 0:
            self.hit_requests += 1
            self.hit_tokens += hit
            self.hit_cap_tokens += hit
        if self.on_admit is not None:
            self.on_admit(req, hit)

    def funnel(self) -> Funnel:
        observed = {
            "requests": (self.admitted, self.cap_tokens),
            "executed_hits": (self.hit_requests, self.hit_cap_tokens),
        }
        stages = tuple(FunnelStage(name=name, requests=observed.get(name, (None, None))[0],
                                   tokens=observed.get(name, (None, None))[1])
                       for name in STAGES)
        rejections = tuple(Rejection(reason=reason, requests=None, tokens=None)
                           for reason in REJECTION_REASONS)
        lengths = PrefixLengths(prompt=self.prompt_tokens, semantic=None, indexed=None,
                                cap=self.cap_tokens, runtime=self.hit_tokens)
        return Funnel(stages=stages, rejections=rejections, lengths=lengths)

    def counters(self) -> Counters:
        return Counters(
            steps=self.steps,
            requests_submitted=self.arrivals,
            requests_finished=self.finished,
            prompt_tokens=self.prompt_tokens,
            hit_tokens=self.hit_tokens,
            recomputed_tokens=self.prompt_tokens - self.hit_tokens,
            decode_tokens=self.decode_tokens,
            evictions=self.evictions,
            evicted_tokens=self.evicted_tokens,
            locked_eviction_rejects=self.locked_eviction_rejects,
            **{name: None for name in UNOBSERVED},
        )

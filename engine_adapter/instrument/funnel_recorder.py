"""Accumulates the prefix-hit funnel, one admission at a time (seed 000 0x0CF, 0x07A).

The engine calls `record()` once per request, at its first admission, with the facts it
observed; the recorder places the request in the first stage it fails and accumulates the
token drops per stage so that the frozen `Funnel` is monotone by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_adapter.funnel import REJECTION_REASONS, STAGES, Funnel, FunnelStage, PrefixLengths, Rejection


@dataclass(frozen=True, kw_only=True)
class AdmissionFacts:
    """What the engine knew about one request when it admitted it.

    s_any / s_ns / s_sem: content-oracle lengths (page aligned) capped at s_cap.
    s_indexed: what SGLang's match returned (device) plus what the host tier can supply.
    mapped: the host-tier part (if any) was reloaded rather than recomputed.
    snapshot_current: the admitted hit was still valid at execution (no generation bump
      while a reload was in flight).
    s_runtime: prefix rows actually reused.
    """

    s_prompt: int
    s_cap: int
    authorized: bool
    s_any: int
    s_ns: int
    s_sem: int
    s_indexed: int
    leased: bool
    mapped: bool
    snapshot_current: bool
    s_runtime: int


class FunnelRecorder:
    """Mutable accumulator; `freeze()` returns the immutable `Funnel`."""

    def __init__(self) -> None:
        self._stage_requests = [0] * len(STAGES)
        self._stage_tokens = [0] * len(STAGES)
        self._lengths = dict(prompt=0, semantic=0, indexed=0, cap=0, runtime=0)
        # Called with each recorded request's Tracked after record() (the what-if shadow)
        self.observers: list = []

    def record(self, facts: AdmissionFacts) -> None:
        """Place one request in the funnel. Tokens carried per stage never increase."""
        carried = facts.s_cap
        gates = (
            (facts.authorized, facts.s_cap),
            (facts.s_any > 0, facts.s_any),
            (facts.s_ns > 0, facts.s_ns),
            (facts.s_sem > 0, facts.s_sem),
            (facts.leased and facts.s_indexed > 0, facts.s_indexed),
            (facts.mapped, facts.s_indexed),
            (facts.snapshot_current, facts.s_indexed),
            (facts.s_runtime > 0, facts.s_runtime),
        )
        self._stage_requests[0] += 1
        self._stage_tokens[0] += carried
        for index, (passed, tokens) in enumerate(gates, start=1):
            if not passed:
                break
            carried = min(carried, tokens)
            self._stage_requests[index] += 1
            self._stage_tokens[index] += carried
        self._lengths["prompt"] += facts.s_prompt
        self._lengths["semantic"] += facts.s_sem
        self._lengths["indexed"] += facts.s_indexed
        self._lengths["cap"] += facts.s_cap
        self._lengths["runtime"] += facts.s_runtime

    def freeze(self) -> Funnel:
        stages = tuple(
            FunnelStage(name=name, requests=self._stage_requests[i], tokens=self._stage_tokens[i])
            for i, name in enumerate(STAGES)
        )
        rejections = tuple(
            Rejection(
                reason=reason,
                requests=self._stage_requests[i] - self._stage_requests[i + 1],
                tokens=self._stage_tokens[i] - self._stage_tokens[i + 1],
            )
            for i, reason in enumerate(REJECTION_REASONS)
        )
        return Funnel(stages=stages, rejections=rejections, lengths=PrefixLengths(**self._lengths))

    @property
    def prompt_tokens(self) -> int:
        return self._lengths["prompt"]

    @property
    def hit_tokens(self) -> int:
        return self._lengths["runtime"]

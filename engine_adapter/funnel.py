"""The prefix-hit funnel (seed 000 0x0CF) and the four prefix lengths (seed 000 0x07A).

::

    requests >= authorized >= candidates >= compatible >= current_generation
             >= leased >= mapped >= snapshot_current >= executed_hits

Each request that leaves the funnel between two stages is counted in exactly one rejection
bucket, named after the stage it failed to enter. Tokens follow the same path: a stage's
token count is the prefix tokens still claimable by the requests that reached it, and the
tokens lost between two stages (whole requests leaving, or survivors keeping a shorter
prefix) go to that stage's bucket, so `stage[i].tokens - stage[i+1].tokens ==
rejection[i].tokens` and the same for requests.

A stage an engine cannot observe has `requests is None`; renderers show "not observable".

Prefix lengths per request (seed 000 0x07A), summed here:

    0 <= S_runtime <= min(S_sem, S_indexed, S_cap) <= S_prompt,  S_recompute = S_prompt - S_runtime
"""

from __future__ import annotations

from dataclasses import dataclass

STAGES: tuple[str, ...] = (
    "requests",
    "authorized",
    "candidates",
    "compatible",
    "current_generation",
    "leased",
    "mapped",
    "snapshot_current",
    "executed_hits",
)

# Rejection bucket for a request that fails to enter STAGES[i + 1].
REJECTION_REASONS: tuple[str, ...] = (
    "unauthorized_namespace",  # -> authorized: refused before the tree is consulted
    "index_miss",  # -> candidates: no namespace or generation ever computed this prefix
    "incompatible_namespace",  # -> compatible: only another tenant/adapter holds it
    "stale_generation",  # -> current_generation: only an older model generation holds it
    "evicted",  # -> leased: computed here before, no longer resident, nothing to lock
    "mapping_lag",  # -> mapped: resident only in the host tier, reload not complete
    "stale_snapshot",  # -> snapshot_current: invalidated between admission and execution
    "not_executed",  # -> executed_hits: admitted with a hit that the forward did not use
)


@dataclass(frozen=True, kw_only=True)
class FunnelStage:
    name: str
    requests: int | None
    tokens: int | None


@dataclass(frozen=True, kw_only=True)
class Rejection:
    reason: str
    requests: int | None
    tokens: int | None


@dataclass(frozen=True, kw_only=True)
class PrefixLengths:
    """Sums over admitted requests of the seed 000 0x07A lengths."""

    prompt: int = 0
    semantic: int | None = 0  # S_sem
    indexed: int | None = 0  # S_indexed
    cap: int = 0  # S_cap = S_prompt - 1 (logits cap)
    runtime: int = 0  # S_runtime

    @property
    def recompute(self) -> int:
        return self.prompt - self.runtime


@dataclass(frozen=True, kw_only=True)
class Funnel:
    stages: tuple[FunnelStage, ...]
    rejections: tuple[Rejection, ...]
    lengths: PrefixLengths

    @property
    def prompt_tokens(self) -> int:
        return self.lengths.prompt

    @property
    def hit_tokens(self) -> int:
        return self.lengths.runtime

    @property
    def recomputed_tokens(self) -> int:
        return self.lengths.recompute

    @property
    def hit_rate(self) -> float | None:
        """seed 003 eq. (2): H_prefix = sum S_match / sum S_prompt; None before any request."""
        if self.lengths.prompt == 0:
            return None
        return self.lengths.runtime / self.lengths.prompt

    def stage(self, name: str) -> FunnelStage:
        return self.stages[STAGES.index(name)]

    def is_monotone(self) -> bool:
        """Every observable stage is <= the previous observable one, in requests and tokens,
        and each drop equals its rejection bucket."""
        previous: FunnelStage | None = None
        for index, stage in enumerate(self.stages):
            if stage.requests is None:
                continue
            if previous is not None:
                if stage.requests > previous.requests or (stage.tokens or 0) > (previous.tokens or 0):
                    return False
            previous = stage
        for index in range(len(self.stages) - 1):
            here, there, bucket = self.stages[index], self.stages[index + 1], self.rejections[index]
            if None in (here.requests, there.requests, bucket.requests):
                continue
            if here.requests - there.requests != bucket.requests:
                return False
            if (here.tokens or 0) - (there.tokens or 0) != (bucket.tokens or 0):
                return False
        return True


def empty_funnel() -> Funnel:
    """A funnel with every stage observable and zero."""
    return Funnel(
        stages=tuple(FunnelStage(name=s, requests=0, tokens=0) for s in STAGES),
        rejections=tuple(Rejection(reason=r, requests=0, tokens=0) for r in REJECTION_REASONS),
        lengths=PrefixLengths(),
    )

"""The fleet's figures from its per-request outcomes: per replica and for the fleet.

    hit rate        sum(hit tokens) / sum(prompt tokens)               (seed 003 eq. 2)
    imbalance       max_j x_j / mean_j x_j, x = requests, prompt tokens (1.0: even)
    TTFT, e2e       p50 / p99 over served requests (virtual clock)
    regret          sum over requests of max(0, hit_oracle(r) - hit(r)): the hit tokens
                    the oracle router got that this policy did not (needs an oracle run
                    of the same fleet on the same trace)

Rejected requests (SGLang's door refused them) count in `rejected`, not in the rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kvctl.fleet.loop import Outcome
from kvctl.replay.report import Percentiles, percentiles


@dataclass(frozen=True, kw_only=True)
class Share:
    """One replica's, or the fleet's, served traffic."""

    requests: int
    rejected: int
    prompt_tokens: int
    hit_tokens: int
    ttft_s: Percentiles
    e2e_s: Percentiles

    @property
    def hit_rate(self) -> float | None:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else None

    def to_dict(self) -> dict:
        return {"requests": self.requests, "rejected": self.rejected,
                "prompt_tokens": self.prompt_tokens, "hit_tokens": self.hit_tokens,
                "hit_rate": self.hit_rate, "ttft_s": asdict(self.ttft_s),
                "e2e_s": asdict(self.e2e_s)}


def share(outcomes: Sequence[Outcome]) -> Share:
    served = [o for o in outcomes if o.rejected is None]
    return Share(requests=len(served), rejected=len(outcomes) - len(served),
                 prompt_tokens=sum(o.prompt_tokens for o in served),
                 hit_tokens=sum(o.hit_tokens for o in served),
                 ttft_s=percentiles([o.ttft_s for o in served]),
                 e2e_s=percentiles([o.e2e_s for o in served]))


def imbalance(values: Sequence[int]) -> float | None:
    """max / mean (1.0 when even); None for an empty fleet or no traffic at all."""
    if not values or not sum(values):
        return None
    return max(values) / (sum(values) / len(values))


def regret_tokens(outcomes: Sequence[Outcome], oracle: Sequence[Outcome]) -> int:
    """Sum over requests of the oracle's hit tokens beyond this policy's (by rid)."""
    theirs = {o.rid: o.hit_tokens for o in oracle if o.rejected is None}
    return sum(max(0, theirs.get(o.rid, 0) - o.hit_tokens)
               for o in outcomes if o.rejected is None)


@dataclass(frozen=True, kw_only=True)
class FleetFigures:
    fleet: Share
    replicas: tuple[Share, ...]
    request_imbalance: float | None
    token_imbalance: float | None
    regret_tokens: int | None = None
    oracle_hit_tokens: int | None = None

    def to_dict(self) -> dict:
        return {"fleet": self.fleet.to_dict(),
                "replicas": [r.to_dict() for r in self.replicas],
                "imbalance": {"requests": self.request_imbalance,
                              "prompt_tokens": self.token_imbalance},
                "regret_tokens": self.regret_tokens,
                "oracle_hit_tokens": self.oracle_hit_tokens}


def figures(outcomes: Sequence[Outcome], replicas: int,
            oracle: Sequence[Outcome] | None = None) -> FleetFigures:
    per = [share([o for o in outcomes if o.replica == j]) for j in range(replicas)]
    return FleetFigures(
        fleet=share(outcomes), replicas=tuple(per),
        request_imbalance=imbalance([p.requests for p in per]),
        token_imbalance=imbalance([p.prompt_tokens for p in per]),
        regret_tokens=regret_tokens(outcomes, oracle) if oracle is not None else None,
        oracle_hit_tokens=(sum(o.hit_tokens for o in oracle if o.rejected is None)
                           if oracle is not None else None))

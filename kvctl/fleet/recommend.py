"""The fewest replicas, and the router, that meet an SLO: `kvctl plan recommend --trace`.

    parse_slos(["ttft-p99=2s", "hit-rate=40%"]) -> (Slo, ...)     (InputError: one line)
    search(routers, max_replicas, slos, evaluate) -> Search       (pure: no engine here)
    fleet_evaluator(base) -> evaluate(router, n)                  (each call a fleet replay)

SLO keys: ttft-p99, ttft-p50, e2e-p99, e2e-p50 (maxima, seconds: `2s`, `500ms`, a bare
number is seconds) and hit-rate (a minimum: `40%` or `0.4`). Every target is > 0.

The search, per router (kvctl/fleet/runner.py replays one fleet per evaluation):

    doubling   n = 1, 2, 4, ... (max_replicas last), until a run meets every SLO
    bisection  between the last miss and the first meet, until they are adjacent
    answer     the first meet; n - 1 (when n > 1) is then always a run that missed, and
               the output names what it missed ("1 replica misses: ttft-p99 3.10 s")

This ASSUMES "meets every SLO" is monotone in replicas: once n meets, every larger n
does. Latency usually falls as replicas grow, but a hit-rate floor can break this (more
replicas split the traffic, and so the cache): a fleet that meets only at n = 3 among
1..8 is not found (1, 2, 4, 8 are the runs), and with meets at 3 and 8 only, 8 is
answered. The runs made are all reported; nothing the search skipped is claimed.

The recommendation: the fewest replicas over the routers; among routers tied on
replicas, the higher fleet hit rate, then the lower ttft-p99, then --routers order.
When no router meets the SLO within max_replicas there is none, and the closest run is
named: the one whose worst SLO is the least far off (value / target for a maximum,
target / value for a minimum), fewer replicas first on a tie.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvctl.errors import InputError

DEFAULT_ROUTERS = ("round_robin", "power_of_two", "cache_aware")
DEFAULT_MAX_REPLICAS = 8
LATENCY_KEYS = ("ttft-p99", "ttft-p50", "e2e-p99", "e2e-p50")
SLO_KEYS = (*LATENCY_KEYS, "hit-rate")
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"


@dataclass(frozen=True)
class Slo:
    """One objective: `key` (SLO_KEYS), `target` (seconds, or a fraction for hit-rate)."""

    key: str
    target: float

    @property
    def minimum(self) -> bool:  # hit-rate is a floor; latencies are ceilings
        return self.key == "hit-rate"

    def met(self, value: float | None) -> bool:
        if value is None:  # nothing served: no latency, no hit rate
            return False
        return value >= self.target if self.minimum else value <= self.target

    def distance(self, value: float | None) -> float:
        """How far off: > 1 missed, <= 1 met (value / target; target / value for a floor)."""
        if value is None:
            return math.inf
        if self.minimum:
            return math.inf if value <= 0 else self.target / value
        return value / self.target

    def show(self, value: float | None) -> str:
        return fmt_value(self.key, value)

    def describe(self) -> str:
        return f"{self.key} {'>=' if self.minimum else '<='} {fmt_value(self.key, self.target)}"


def fmt_value(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key == "hit-rate":
        return f"{value:.2%}"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def parse_slo(text: str) -> Slo:
    """`KEY=VALUE` -> Slo; InputError (one line) on an unknown key or a bad value."""
    key, sep, raw = text.partition("=")
    key, raw = key.strip().lower().replace("_", "-"), raw.strip().lower()
    if not sep:
        raise InputError(f"{text!r}: expected KEY=VALUE with KEY one of {', '.join(SLO_KEYS)}")
    if key not in SLO_KEYS:
        raise InputError(f"unknown SLO {key!r}; valid: {', '.join(SLO_KEYS)}")
    if key == "hit-rate":
        match = re.fullmatch(rf"({_NUMBER})\s*(%?)", raw)
        if not match:
            raise InputError(f"hit-rate={raw!r}: expected a share such as 40% or 0.4")
        value = float(match.group(1)) / (100 if match.group(2) else 1)
        if math.isfinite(value) and value > 1:
            raise InputError(f"hit-rate={raw!r}: a share is at most 100% (or 1)")
    else:
        match = re.fullmatch(rf"({_NUMBER})\s*(ms|s)?", raw)
        if not match:
            raise InputError(f"{key}={raw!r}: expected a time such as 2s or 500ms")
        value = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{key}={raw!r}: the target must be a positive finite number")
    return Slo(key, value)


def parse_slos(texts: Sequence[str]) -> tuple[Slo, ...]:
    """Every --slo, each key once; at least one."""
    slos = [parse_slo(t) for t in texts]
    if not slos:
        raise InputError("give at least one --slo KEY=VALUE "
                         f"(keys: {', '.join(SLO_KEYS)}), e.g. --slo ttft-p99=2s")
    seen = set()
    for slo in slos:
        if slo.key in seen:
            raise InputError(f"SLO {slo.key} given twice")
        seen.add(slo.key)
    return tuple(slos)


def parse_routers(text: str) -> tuple[str, ...]:
    """`round_robin,cache_aware` -> names, each a known policy, each once."""
    from kvctl.fleet.routers.registry import check_policy

    names = [n.strip() for n in text.split(",")]
    if not any(names) or not all(names):
        raise InputError(f"{text!r}: expected a comma list of router policies")
    for name in names:
        check_policy(name)
    if len(set(names)) != len(names):
        raise InputError(f"{text!r}: a router is listed twice")
    return tuple(names)


def check_max_replicas(n: int) -> int:
    from kvctl.fleet.runner import MAX_REPLICAS

    if not 1 <= n <= MAX_REPLICAS:
        raise InputError(f"--max-replicas must be in 1..{MAX_REPLICAS}, got {n}")
    return n


# ----- the search (pure) ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Run:
    """One evaluation: a fleet of `replicas` behind `router`; metrics by SLO key (and
    `rejected`, `requests`), whether each SLO was met, and the order it ran in (1-based)."""

    router: str
    replicas: int
    metrics: dict
    met: dict
    order: int

    @property
    def meets(self) -> bool:
        return all(self.met.values())

    def missed(self, slos: Sequence[Slo]) -> list[Slo]:
        return [s for s in slos if not self.met[s.key]]

    def distance(self, slos: Sequence[Slo]) -> float:
        return max(s.distance(self.metrics.get(s.key)) for s in slos)


@dataclass(frozen=True, kw_only=True)
class RouterAnswer:
    router: str
    replicas: int | None  # None: no n in 1..max met every SLO (among the runs made)
    answer: Run | None
    below: Run | None  # the n - 1 run when replicas > 1 (it missed)


@dataclass(frozen=True, kw_only=True)
class Search:
    slos: tuple[Slo, ...]
    max_replicas: int
    runs: tuple[Run, ...]  # in the order they ran
    answers: tuple[RouterAnswer, ...]  # in --routers order
    recommendation: RouterAnswer | None
    closest: Run | None  # when there is no recommendation: the run least far off


Evaluate = Callable[[str, int], dict]


def search(routers: Sequence[str], max_replicas: int, slos: Sequence[Slo],
           evaluate: Evaluate) -> Search:
    """Per router, the fewest replicas meeting every SLO (doubling, then bisection; see the
    module docstring for the monotonicity it assumes). `evaluate(router, n)` returns a
    metrics dict keyed by SLO key (None where nothing was served); each (router, n) is
    evaluated at most once."""
    if max_replicas < 1:
        raise InputError(f"--max-replicas must be at least 1, got {max_replicas}")
    slos = tuple(slos)
    runs: list[Run] = []
    cache: dict[tuple[str, int], Run] = {}

    def run(router: str, n: int) -> Run:
        if (router, n) not in cache:
            metrics = dict(evaluate(router, n))
            met = {s.key: s.met(metrics.get(s.key)) for s in slos}
            cache[(router, n)] = Run(router=router, replicas=n, metrics=metrics, met=met,
                                     order=len(runs) + 1)
            runs.append(cache[(router, n)])
        return cache[(router, n)]

    answers = []
    for router in routers:
        low, high, n = 0, None, 1  # low: the largest miss seen; high: the smallest meet
        while True:
            if run(router, n).meets:
                high = n
                break
            low = n
            if n == max_replicas:
                break
            n = min(2 * n, max_replicas)
        if high is not None:
            while high - low > 1:
                mid = (low + high) // 2
                if run(router, mid).meets:
                    high = mid
                else:
                    low = mid
            below = run(router, high - 1) if high > 1 else None  # already run: low
        answers.append(RouterAnswer(router=router, replicas=high,
                                    answer=cache[(router, high)] if high else None,
                                    below=below if high else None))
    found = [a for a in answers if a.replicas is not None]
    recommendation = None
    if found:
        def rank(item):
            index, a = item
            hit = a.answer.metrics.get("hit-rate")
            ttft = a.answer.metrics.get("ttft-p99")
            return (a.replicas, -(hit if hit is not None else -1.0),
                    ttft if ttft is not None else math.inf, index)

        recommendation = min(enumerate(found), key=rank)[1]
    closest = None
    if recommendation is None and runs:
        closest = min(runs, key=lambda r: (r.distance(slos), r.replicas, r.order))
    return Search(slos=slos, max_replicas=max_replicas, runs=tuple(runs),
                  answers=tuple(answers), recommendation=recommendation, closest=closest)


def metrics_of(document: dict) -> dict:
    """A fleet replay's --json document (FleetResult.to_dict) -> metrics by SLO key."""
    fleet = document["fleet"]
    return {"ttft-p99": fleet["ttft_s"]["p99"], "ttft-p50": fleet["ttft_s"]["p50"],
            "e2e-p99": fleet["e2e_s"]["p99"], "e2e-p50": fleet["e2e_s"]["p50"],
            "hit-rate": fleet["hit_rate"], "requests": fleet["requests"],
            "rejected": fleet["rejected"]}


# ----- the real evaluator: one fleet replay per call -----------------------------------


@dataclass
class FleetEvaluator:
    """evaluate(router, n): run the fleet replay of `base` (ReplaySettings) with n replicas
    behind router; keeps each run's header (workload, replica settings) for the report."""

    base: object
    on_start: Callable[[str, int], None] | None = None
    on_progress: Callable[[int, int | None, float], None] | None = None
    headers: list = field(default_factory=list)

    def check(self, routers: Sequence[str], max_replicas: int) -> None:
        """Everything a run would refuse, before any run (InputError)."""
        from kvctl.fleet.runner import FleetSettings, prepare_fleet

        for router in routers:
            prepare_fleet(self.base, FleetSettings(replicas=max_replicas, router=router))

    def __call__(self, router: str, n: int) -> dict:
        from kvctl.fleet.runner import FleetSettings, prepare_fleet, run_fleet

        if self.on_start is not None:
            self.on_start(router, n)
        prepared = prepare_fleet(self.base, FleetSettings(replicas=n, router=router))
        document = run_fleet(prepared, on_progress=self.on_progress).to_dict()
        self.headers.append({"workload": document["workload"],
                             "replica": document["replica"], "notes": document["notes"]})
        return metrics_of(document)


def search_document(result: Search, *, header: dict | None, routers: Sequence[str]) -> dict:
    """The --json document: the SLO, every run, each router's answer, the recommendation
    (null when none), the closest run then, and what validated it."""

    def run_doc(run: Run | None) -> dict | None:
        if run is None:
            return None
        return {"router": run.router, "replicas": run.replicas, "order": run.order,
                "metrics": run.metrics, "met": run.met, "meets": run.meets,
                "missed": [s.key for s in run.missed(result.slos)]}

    def answer_doc(a: RouterAnswer | None) -> dict | None:
        if a is None:
            return None
        return {"router": a.router, "replicas": a.replicas,
                "metrics": a.answer.metrics if a.answer else None,
                "below": run_doc(a.below)}

    replica = (header or {}).get("replica", {})
    return {
        "workload": (header or {}).get("workload"),
        "replica": replica,
        "slo": [{"key": s.key, "target": s.target, "kind": "min" if s.minimum else "max"}
                for s in result.slos],
        "routers": list(routers), "max_replicas": result.max_replicas,
        "search": "per router: doubling n = 1, 2, 4, ... then bisection; assumes meeting "
                  "the SLO is monotone in replicas; n - 1 is a run that missed",
        "runs": [run_doc(r) for r in result.runs],
        "answers": [answer_doc(a) for a in result.answers],
        "recommendation": answer_doc(result.recommendation),
        "closest": run_doc(result.closest),
        "validated_by": {"method": "fleet replay", "runs": len(result.runs),
                         "clock": replica.get("clock")},
    }

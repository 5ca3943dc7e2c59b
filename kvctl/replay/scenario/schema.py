"""Scenario files: YAML that generates agent workloads from a seed (seed 003's agent loop).

Validation is explicit and names the field at fault (`agents[1].tools[0].wait_s: ...`), so a
typo in a 60-line file is a one-line error, not a traceback. The result is frozen.

Distributions (`Dist`) accept: a number (constant); {min, max} (uniform integers);
{mean, sd} (normal, truncated at 1); {dist: exponential, mean}; {dist: lognormal, median,
sigma}.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from kvctl.errors import InputError

RETENTIONS = ("retain", "drop", "offload", "auto")
FORK_KINDS = ("tree-of-thought", "self-consistency")
ACTIONS = ("bump_generation", "flush_cache")
ENGINE_KEYS = (
    "pool_tokens", "page_size", "token_budget", "tau_high", "eviction_policy",
    "max_running_requests", "max_context_len", "default_retention", "host_capacity_tokens",
)


@dataclass(frozen=True)
class Dist:
    kind: str  # const | uniform | normal | exponential | lognormal
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> float:
        if self.kind == "const":
            return self.a
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        if self.kind == "normal":
            return max(1.0, rng.gauss(self.a, self.b))
        if self.kind == "exponential":
            return rng.expovariate(1.0 / self.a)
        return self.a * math.exp(rng.gauss(0.0, self.b))  # lognormal: median * e^(sigma z)

    def tokens(self, rng: random.Random) -> int:
        return max(1, int(round(self.sample(rng))))

    @property
    def mean(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a * math.exp(self.b**2 / 2)
        return self.a


@dataclass(frozen=True)
class Tool:
    name: str
    weight: float
    wait_s: Dist
    retention: str


@dataclass(frozen=True)
class Forks:
    probability: float
    branches: int
    kind: str
    branch_output_tokens: Dist


@dataclass(frozen=True)
class AntiPatterns:
    timestamp_head: float = 0.0
    tool_list_churn: float = 0.0
    nondeterministic_serialization: float = 0.0


@dataclass(frozen=True)
class Agent:
    name: str
    tenant: str
    namespace: str | None
    sessions_per_s: float
    turns: Dist
    context_tokens: Dist
    observation_tokens: Dist
    output_tokens: Dist
    tools: tuple[Tool, ...]
    forks: Forks | None
    anti_patterns: AntiPatterns


@dataclass(frozen=True)
class Tenant:
    name: str
    reads: tuple[str, ...]


@dataclass(frozen=True)
class Event:
    at_s: float
    action: str


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    duration_s: float
    max_sessions: int | None
    system_tokens: int
    tool_schema_tokens: int
    tenants: tuple[Tenant, ...]
    agents: tuple[Agent, ...]
    events: tuple[Event, ...]
    engine: dict[str, Any] = field(default_factory=dict)


class _At:
    """A cursor into the YAML document that knows its path, for error messages."""

    def __init__(self, value: Any, path: str, source: str) -> None:
        self.value, self.path, self.source = value, path, source

    def fail(self, message: str) -> InputError:
        where = f"{self.path}: " if self.path else ""
        return InputError(f"{self.source}: {where}{message}")

    def child(self, key: str | int, required: bool = True, default: Any = None) -> _At:
        path = f"{self.path}[{key}]" if isinstance(key, int) else (f"{self.path}.{key}" if self.path else key)
        if isinstance(key, int):
            return _At(self.value[key], path, self.source)
        if not isinstance(self.value, dict):
            raise self.fail("expected a mapping")
        if key not in self.value:
            if required:
                raise _At(None, path, self.source).fail("missing")
            return _At(default, path, self.source)
        return _At(self.value[key], path, self.source)

    def keys_within(self, allowed: tuple[str, ...]) -> None:
        if not isinstance(self.value, dict):
            raise self.fail("expected a mapping")
        unknown = sorted(set(self.value) - set(allowed))
        if unknown:
            raise self.fail(f"unknown key {unknown[0]!r}; valid: {', '.join(allowed)}")

    def number(self, low: float | None = None, high: float | None = None, integer: bool = False) -> float:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (
                integer and not float(v).is_integer()):
            raise self.fail(f"expected {'an integer' if integer else 'a finite number'}, got {v!r}")
        if (low is not None and v < low) or (high is not None and v > high):
            raise self.fail(f"{v} is outside [{low}, {high}]")
        return int(v) if integer else float(v)

    def text(self, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(self.value, str) or not self.value:
            raise self.fail(f"expected a non-empty string, got {self.value!r}")
        if choices and self.value not in choices:
            raise self.fail(f"{self.value!r} is not one of {', '.join(choices)}")
        return self.value

    def items(self) -> list[_At]:
        if not isinstance(self.value, list):
            raise self.fail("expected a list")
        return [self.child(i) for i in range(len(self.value))]

    def dist(self) -> Dist:
        v = self.value
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return Dist("const", self.number(low=0))
        if not isinstance(v, dict):
            raise self.fail("expected a number or a distribution mapping")
        kind = v.get("dist")
        if kind is None and {"min", "max"} <= set(v):
            self.keys_within(("min", "max"))
            low, high = self.child("min").number(0, integer=True), self.child("max").number(0, integer=True)
            if high < low:
                raise self.fail(f"max {high} < min {low}")
            return Dist("uniform", low, high)
        if kind is None and "mean" in v:
            self.keys_within(("mean", "sd"))
            return Dist("normal", self.child("mean").number(0), self.child("sd", False, 0).number(0))
        if kind == "exponential":
            self.keys_within(("dist", "mean"))
            return Dist("exponential", self.child("mean").number(low=1e-9))
        if kind == "lognormal":
            self.keys_within(("dist", "median", "sigma"))
            return Dist("lognormal", self.child("median").number(low=1e-9), self.child("sigma").number(0))
        raise self.fail("a distribution is {min,max}, {mean,sd}, {dist: exponential, mean} "
                        "or {dist: lognormal, median, sigma}")


def parse_scenario(document: Any, source: str) -> Scenario:
    """Validate a loaded YAML document; raises InputError naming the bad field."""
    root = _At(document, "", source)
    root.keys_within(("name", "description", "seed", "duration_s", "max_sessions", "prefix",
                      "tenants", "agents", "events", "engine"))
    prefix = root.child("prefix", False, {})
    prefix.keys_within(("system_tokens", "tool_schema_tokens"))
    tenants = tuple(_tenant(t) for t in root.child("tenants", False, [{"name": "default"}]).items())
    names = {t.name for t in tenants}
    agents = tuple(_agent(a, names) for a in root.child("agents").items())
    if not agents:
        raise root.child("agents").fail("needs at least one agent")
    engine = root.child("engine", False, {})
    engine.keys_within(ENGINE_KEYS)
    engine_fields = {key: _engine_field(engine.child(key)) for key in (engine.value or {})}
    events = []
    for ev in root.child("events", False, []).items():
        ev.keys_within(("at_s", "action"))
        events.append(Event(ev.child("at_s").number(0), ev.child("action").text(ACTIONS)))
    max_sessions = root.child("max_sessions", False, None)
    return Scenario(
        name=root.child("name").text(),
        description=str(root.child("description", False, "").value or ""),
        seed=root.child("seed", False, 0).number(0, integer=True),
        duration_s=root.child("duration_s").number(low=1e-9),
        max_sessions=None if max_sessions.value is None else max_sessions.number(1, integer=True),
        system_tokens=prefix.child("system_tokens", False, 0).number(0, integer=True),
        tool_schema_tokens=prefix.child("tool_schema_tokens", False, 0).number(0, integer=True),
        tenants=tenants,
        agents=agents,
        events=tuple(sorted(events, key=lambda e: e.at_s)),
        engine=engine_fields,
    )


def _tenant(at: _At) -> Tenant:
    at.keys_within(("name", "reads"))
    reads = tuple(r.text() for r in at.child("reads", False, []).items())
    return Tenant(at.child("name").text(), reads)


def _agent(at: _At, tenants: set[str]) -> Agent:
    at.keys_within(("name", "tenant", "namespace", "sessions_per_s", "turns", "context_tokens",
                    "observation_tokens", "output_tokens", "tools", "forks", "anti_patterns"))
    tenant = at.child("tenant", False, "default")
    if tenant.text() not in tenants:
        raise tenant.fail(f"unknown tenant {tenant.value!r}; declared: {', '.join(sorted(tenants))}")
    tools = tuple(_tool(t) for t in at.child("tools", False, []).items())
    namespace = at.child("namespace", False, None)
    forks = at.child("forks", False, None)
    anti = at.child("anti_patterns", False, {})
    anti.keys_within(("timestamp_head", "tool_list_churn", "nondeterministic_serialization"))
    return Agent(
        name=at.child("name").text(),
        tenant=tenant.value,
        namespace=None if namespace.value is None else namespace.text(),
        sessions_per_s=at.child("sessions_per_s").number(low=1e-9),
        turns=at.child("turns", False, 1).dist(),
        context_tokens=at.child("context_tokens").dist(),
        observation_tokens=at.child("observation_tokens", False, 0).dist(),
        output_tokens=at.child("output_tokens").dist(),
        tools=tools or (Tool("none", 1.0, Dist("const", 0.0), "drop"),),
        forks=None if forks.value is None else _forks(forks),
        anti_patterns=AntiPatterns(**{k: anti.child(k).number(0, 1) for k in (anti.value or {})}),
    )


def _tool(at: _At) -> Tool:
    at.keys_within(("name", "weight", "wait_s", "retention"))
    return Tool(
        name=at.child("name").text(),
        weight=at.child("weight", False, 1.0).number(low=0),
        wait_s=at.child("wait_s").dist(),
        retention=at.child("retention", False, "drop").text(RETENTIONS),
    )


def _forks(at: _At) -> Forks:
    at.keys_within(("probability", "branches", "kind", "branch_output_tokens"))
    return Forks(
        probability=at.child("probability").number(0, 1),
        branches=at.child("branches").number(2, 64, integer=True),
        kind=at.child("kind", False, "tree-of-thought").text(FORK_KINDS),
        branch_output_tokens=at.child("branch_output_tokens", False, 64).dist(),
    )


def _engine_field(at: _At) -> Any:
    """One `engine:` override, typed and ranged as EngineConfig needs it (`engine.page_size:
    expected an integer, got 16.5`). Policy names are checked by EngineConfig itself."""
    key = at.path.rsplit(".", 1)[-1]
    if key in ("eviction_policy",):
        return at.text()
    if key == "default_retention":
        return at.text(RETENTIONS)
    if key == "tau_high":
        value = at.number(0, 1)
        if value == 0:
            raise at.fail("must be above 0 (nothing would ever be admitted)")
        return value
    low = 0 if key in ("pool_tokens", "host_capacity_tokens") else 1  # 0 = unbounded / none
    high = 65_536 if key == "page_size" else 2**40
    return int(at.number(low, high, integer=True))

"""`ScenarioDriver`: turns a `Scenario` into sessions of requests on the embedded engine.

A session (one agent trajectory, seed 003's agent loop) is a sequence of turns:

    prompt(k)   = [timestamp?] system  tool-schema  body(k)
    body(k + 1) = body(k) + output(k) + observation(k)      after a tool wait

The tool called after turn k is drawn when turn k is submitted, so turn k carries that
tool's retention policy (retain / drop / offload, or auto: seed 003's break-even on the
modeled deployment). Forks submit sibling requests on the same prefix: self-consistency
samples (identical prompts) or tree-of-thought branches (distinct short thoughts).
Anti-patterns (seed 003 "What breaks the hit rate") move the first differing token toward
the head: a per-call timestamp, tool-list churn, nondeterministic schema serialization.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from engine_adapter.embedded.engine import EmbeddedEngine, StepReport
from engine_adapter.embedded.requests import FinishedRecord, RequestSpec
from kvctl.replay.scenario.schema import Agent, Scenario, Tool
from kvctl.replay.scenario.tokens import TokenSpace

TIMESTAMP_TOKENS = 8
THOUGHT_TOKENS = 16
SHUFFLE_CHUNK = 32


@dataclass
class Session:
    sid: str
    agent: Agent
    namespace: str
    turns_total: int
    turn: int = 0
    schema_variant: int = 0
    timestamp_head: bool = False
    nondeterministic: bool = False
    body: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pending_tool: Tool | None = None
    last_prompt_len: int = 0


class ScenarioDriver:
    """WorkloadDriver over a Scenario. Deterministic for (scenario, seed)."""

    def __init__(self, scenario: Scenario, *, seed: int | None = None, limit: int | None = None) -> None:
        self.scenario = scenario
        self.name = scenario.name
        self.engine_defaults = dict(scenario.engine)
        reads = {t.name: t.reads for t in scenario.tenants if t.reads}
        if reads:
            self.engine_defaults["authorized"] = reads
        self.rng = random.Random(scenario.seed if seed is None else seed)
        self.limit = limit
        self.tokens = TokenSpace(scenario.system_tokens, scenario.tool_schema_tokens)
        self.sid_prefix = ""  # set by a live run to keep request ids unique across loops
        self.sessions: dict[str, Session] = {}
        self.by_rid: dict[str, Session] = {}
        self.events = list(scenario.events)
        self.requests_submitted = 0
        self._starts: list[tuple[float, int, Agent]] = []
        self._expected = 0

    # ---- WorkloadDriver ----------------------------------------------------------------

    def prime(self, engine: EmbeddedEngine) -> None:
        """Submit every session's first turn; times are relative to the engine's clock now
        (so a live run can start the scenario again on a warm engine)."""
        self.engine = engine
        origin = engine.clock_s
        self.events = [type(e)(e.at_s + origin, e.action) for e in self.scenario.events]
        counter = 0
        for agent in self.scenario.agents:
            t = self.rng.expovariate(agent.sessions_per_s)
            while t < self.scenario.duration_s:
                self._starts.append((t, counter, agent))
                counter += 1
                t += self.rng.expovariate(agent.sessions_per_s)
        self._starts.sort()
        cap = self.scenario.max_sessions if self.limit is None else min(self.limit, self.scenario.max_sessions or self.limit)
        if cap is not None:
            self._starts = self._starts[:cap]
        for index, (t, _, agent) in enumerate(self._starts):
            self._start_session(f"{self.sid_prefix}{agent.name}-{index}", agent, origin + t)
            self._expected += int(round(agent.turns.mean))

    def next_event_s(self) -> float | None:
        """When the next scripted event is due (the engine never steps past it at once)."""
        return self.events[0].at_s if self.events else None

    def after_step(self, engine: EmbeddedEngine, report: StepReport) -> None:
        for record in report.finished:
            session = self.by_rid.pop(record.rid, None)
            if session is not None:
                self._next_turn(session, record)
        while self.events and (self.events[0].at_s <= engine.clock_s or report.idle):
            event = self.events.pop(0)
            if event.action == "bump_generation":
                engine.bump_generation()
            else:
                engine.flush_cache()

    def exhausted(self) -> bool:
        return not self.by_rid and not self.events

    def total_hint(self) -> int | None:
        return self._expected or None

    # ---- sessions ----------------------------------------------------------------------

    def _start_session(self, sid: str, agent: Agent, t: float) -> None:
        ap = agent.anti_patterns
        tenant = next(x for x in self.scenario.tenants if x.name == agent.tenant)
        session = Session(
            sid=sid, agent=agent, namespace=agent.namespace or tenant.name,
            turns_total=agent.turns.tokens(self.rng),
            timestamp_head=self.rng.random() < ap.timestamp_head,
            nondeterministic=self.rng.random() < ap.nondeterministic_serialization,
            body=self.tokens.unique(agent.context_tokens.tokens(self.rng)),
        )
        self.sessions[sid] = session
        self._submit_turn(session, t)

    def _prompt(self, session: Session) -> np.ndarray:
        parts = []
        if session.timestamp_head:
            parts.append(self.tokens.unique(TIMESTAMP_TOKENS))
        parts.append(self.tokens.system)
        schema = self.tokens.schema(session.schema_variant)
        if session.nondeterministic and len(schema) > SHUFFLE_CHUNK:
            chunks = [schema[i : i + SHUFFLE_CHUNK] for i in range(0, len(schema), SHUFFLE_CHUNK)]
            self.rng.shuffle(chunks)
            schema = np.concatenate(chunks)
        parts += [schema, session.body]
        return np.concatenate(parts)

    def _submit_turn(self, session: Session, t: float) -> None:
        agent = session.agent
        session.turn += 1
        prompt = self._prompt(session)
        output = agent.output_tokens.tokens(self.rng)
        limit = self.engine.config.max_context_len
        last = session.turn >= session.turns_total or self._too_long(len(prompt), output, agent, limit)
        tool = self._draw_tool(agent)
        session.pending_tool = tool
        session.last_prompt_len = len(prompt)
        rid = f"{session.sid}.t{session.turn}"
        tenant = next(x for x in self.scenario.tenants if x.name == agent.tenant).name
        retention = None if last else self._retention(tool, len(prompt) + output)
        self._submit(RequestSpec(
            rid=rid, tokens=prompt, max_new_tokens=output, arrival_s=t, tenant=tenant,
            namespace=session.namespace, session=session.sid, retention=retention, last_turn=last,
        ))
        if not last:
            self.by_rid[rid] = session
        else:
            self.sessions.pop(session.sid, None)
        forks = agent.forks
        if forks is not None and self.rng.random() < forks.probability:
            for branch in range(forks.branches):
                tokens = prompt if forks.kind == "self-consistency" else np.concatenate(
                    [prompt, self.tokens.unique(THOUGHT_TOKENS)])
                out = forks.branch_output_tokens.tokens(self.rng)
                if len(tokens) + out <= limit:
                    self._submit(RequestSpec(rid=f"{rid}.b{branch}", tokens=tokens, max_new_tokens=out,
                                             arrival_s=t, tenant=tenant, namespace=session.namespace))

    def _next_turn(self, session: Session, record: FinishedRecord) -> None:
        agent = session.agent
        if self.rng.random() < agent.anti_patterns.tool_list_churn:
            session.schema_variant = self.tokens.new_schema_variant()
        observation = self.tokens.unique(agent.observation_tokens.tokens(self.rng))
        session.body = np.concatenate([session.body, record.output_ids, observation])
        wait = session.pending_tool.wait_s.sample(self.rng) if session.pending_tool else 0.0
        self._submit_turn(session, record.finish_s + wait)

    def _submit(self, spec: RequestSpec) -> None:
        self.requests_submitted += 1
        self.engine.submit(spec)

    def _draw_tool(self, agent: Agent) -> Tool:
        weights = [t.weight for t in agent.tools]
        return self.rng.choices(agent.tools, weights=weights)[0]

    def _too_long(self, prompt: int, output: int, agent: Agent, limit: int) -> bool:
        """Would the next turn outgrow the context window or the pool? Then end here."""
        growth = output + agent.observation_tokens.mean * 2 + agent.output_tokens.mean * 2
        pool = self.engine.config.pool_tokens
        return prompt + growth > min(limit, pool // 2)

    def _retention(self, tool: Tool, context: int) -> str:
        """`auto`: seed 003's break-even. Retain when the wait is shorter than the reload
        round trip; otherwise offload when a reload beats recompute, else drop."""
        if tool.retention != "auto":
            return tool.retention
        cost = self.engine.cost
        round_trip = 2 * cost.transfer_seconds(context)
        if tool.wait_s.mean <= round_trip:
            return "retain"
        return "offload" if cost.transfer_seconds(context) < cost.prefill_seconds(context) else "drop"

"""`ScenarioDriver` on the embedded engine: sessions, tool waits, forks, events and
anti-patterns become exactly the requests the scenario describes, deterministically."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from engine_adapter.workload import drive
from kvctl.replay.scenario.driver import THOUGHT_TOKENS, TIMESTAMP_TOKENS, ScenarioDriver
from kvctl.replay.scenario.schema import parse_scenario
from kvctl.replay.scenario.tokens import UNIQUE_BASE

pytestmark = pytest.mark.integration

BASE = {
    "name": "driver-test", "seed": 5, "duration_s": 2, "max_sessions": 4,
    "prefix": {"system_tokens": 64, "tool_schema_tokens": 32},
    "agents": [{
        "name": "coder", "sessions_per_s": 4.0, "turns": 3,
        "context_tokens": 50, "observation_tokens": 20, "output_tokens": 6,
        "tools": [{"name": "grep", "wait_s": 0.05, "retention": "retain"}],
    }],
}


def _run(make_engine, document: dict, *, seed: int | None = None):
    """Drive the scenario to completion with integrity checks after every step; returns
    (driver, every submitted spec in order, finished records by rid, engine)."""
    driver = ScenarioDriver(parse_scenario(document, "test.yaml"), seed=seed)
    engine = make_engine(**{k: v for k, v in driver.engine_defaults.items()})
    submitted, finished = [], {}
    original = engine.submit

    def recording(spec):
        submitted.append(spec)
        original(spec)

    engine.submit = recording
    drive(engine, driver, check_every_step=True,
          on_step=lambda report: finished.update({r.rid: r for r in report.finished}))
    return driver, submitted, finished, engine


def _with_agent(**changes) -> dict:
    doc = copy.deepcopy(BASE)
    doc["agents"][0].update(changes)
    return doc


def test_sessions_grow_by_output_and_observation(make_engine):
    """Turn k+1 = turn k's prompt + its output ids + a 20-token observation; the tool's
    retention rides on every turn but the last, which ends the session."""
    _, submitted, finished, _ = _run(make_engine, BASE)
    turns = [s for s in submitted if s.session == "coder-0"]
    assert [s.rid for s in turns] == ["coder-0.t1", "coder-0.t2", "coder-0.t3"]
    assert len(turns[0].tokens) == 64 + 32 + 50
    for previous, current in zip(turns, turns[1:]):
        expected_head = np.concatenate([previous.tokens, finished[previous.rid].output_ids])
        assert np.array_equal(current.tokens[: len(expected_head)], expected_head)
        assert len(current.tokens) == len(expected_head) + 20
        assert current.arrival_s == pytest.approx(finished[previous.rid].finish_s + 0.05)
    assert [(s.retention, s.last_turn) for s in turns] == [("retain", False), ("retain", False), (None, True)]


def test_every_prompt_starts_with_the_shared_system_prompt_and_schema(make_engine):
    """System prompt ids 1..64 then the stable schema variant, then session content."""
    _, submitted, finished, _ = _run(make_engine, BASE)
    for spec in submitted:
        assert np.array_equal(spec.tokens[:64], np.arange(1, 65))
        assert spec.tokens[96] >= UNIQUE_BASE
    later = [finished[s.rid].hit_tokens for s in submitted if s.rid.endswith(".t2")]
    assert all(hit > 96 for hit in later)  # a retained turn is reused past the shared prefix


def test_same_seed_same_workload_other_seed_other_workload(make_engine):
    """A replay is deterministic for a seed; another seed changes the arrivals."""
    _, first, _, engine1 = _run(make_engine, BASE)
    _, again, _, engine2 = _run(make_engine, BASE)
    _, other, _, _ = _run(make_engine, BASE, seed=99)
    signature = [(s.rid, len(s.tokens), s.arrival_s, s.max_new_tokens) for s in first]
    assert signature == [(s.rid, len(s.tokens), s.arrival_s, s.max_new_tokens) for s in again]
    assert [s.arrival_s for s in other] != [s.arrival_s for s in first]
    assert engine1.snapshot().counters.hit_tokens == engine2.snapshot().counters.hit_tokens


def test_max_sessions_caps_the_sessions(make_engine):
    """max_sessions 4 at 4 sessions/s over 2 s: exactly 4 sessions, 3 turns each."""
    driver, submitted, finished, engine = _run(make_engine, BASE)
    assert sorted({s.session for s in submitted}) == ["coder-0", "coder-1", "coder-2", "coder-3"]
    assert len(submitted) == len(finished) == 12 == driver.requests_submitted
    assert driver.exhausted() and not engine.has_work()


def test_self_consistency_forks_submit_identical_prompts(make_engine):
    """Forks with probability 1: three samples with the parent turn's exact prompt."""
    doc = _with_agent(turns=1, forks={"probability": 1.0, "branches": 3, "kind": "self-consistency",
                                      "branch_output_tokens": 4})
    _, submitted, _, _ = _run(make_engine, doc)
    parent = next(s for s in submitted if s.rid == "coder-0.t1")
    children = [s for s in submitted if s.rid.startswith("coder-0.t1.b")]
    assert [c.rid for c in children] == ["coder-0.t1.b0", "coder-0.t1.b1", "coder-0.t1.b2"]
    assert all(np.array_equal(c.tokens, parent.tokens) and c.max_new_tokens == 4 for c in children)
    assert all(c.session is None and c.arrival_s == parent.arrival_s for c in children)


def test_tree_of_thought_forks_extend_the_prompt_with_distinct_thoughts(make_engine):
    """Each branch = parent prompt + 16 unique thought tokens, different per branch."""
    doc = _with_agent(turns=1, forks={"probability": 1.0, "branches": 2, "kind": "tree-of-thought"})
    _, submitted, _, _ = _run(make_engine, doc)
    parent = next(s for s in submitted if s.rid == "coder-0.t1")
    a, b = [s for s in submitted if s.rid.startswith("coder-0.t1.b")]
    for child in (a, b):
        assert len(child.tokens) == len(parent.tokens) + THOUGHT_TOKENS
        assert np.array_equal(child.tokens[: len(parent.tokens)], parent.tokens)
    assert not np.array_equal(a.tokens[-THOUGHT_TOKENS:], b.tokens[-THOUGHT_TOKENS:])


def test_timestamp_at_the_head_breaks_the_shared_prefix(make_engine):
    """Anti-pattern timestamp_head=1: every prompt starts with 8 fresh ids, so single-turn
    sessions never reuse the shared system prompt."""
    doc = _with_agent(turns=1, anti_patterns={"timestamp_head": 1.0})
    _, submitted, finished, _ = _run(make_engine, doc)
    for spec in submitted:
        assert spec.tokens[0] >= UNIQUE_BASE
        assert np.array_equal(spec.tokens[TIMESTAMP_TOKENS:TIMESTAMP_TOKENS + 64], np.arange(1, 65))
    assert all(record.hit_tokens == 0 for record in finished.values())


def test_timed_events_fire_once(make_engine):
    """Timed operator events fire once each: after a bump_generation at 0 s the engine runs
    generation 1, and the driver is exhausted only after both events fired."""
    doc = copy.deepcopy(BASE)
    doc["events"] = [{"at_s": 0.0, "action": "bump_generation"}, {"at_s": 0.5, "action": "flush_cache"}]
    driver, _, _, engine = _run(make_engine, doc)
    assert engine.generation == 1
    assert driver.exhausted()


def test_tenants_and_authorized_reads_reach_the_engine(make_engine):
    """A tenant's `reads` list becomes the engine's authorization; the shared namespace is
    readable by its readers."""
    doc = copy.deepcopy(BASE)
    doc["tenants"] = [{"name": "acme", "reads": ["public"]}, {"name": "globex"}]
    doc["agents"][0].update(tenant="acme", namespace="public")
    driver, submitted, _, engine = _run(make_engine, doc)
    assert driver.engine_defaults["authorized"] == {"acme": ("public",)}
    assert engine.config.authorized == {"acme": ("public",)}
    assert all(s.tenant == "acme" and s.namespace == "public" for s in submitted)
    buckets = {b.reason: b.requests for b in engine.snapshot().funnel.rejections}
    assert buckets["unauthorized_namespace"] == 0

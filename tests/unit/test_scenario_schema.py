"""Scenario files: validation names the field path; distributions are seeded.

Every error is one `InputError` line, `<source>: <field path>: <problem>`.
"""

from __future__ import annotations

import copy
import math
import random

import pytest

from kvctl.errors import InputError
from kvctl.replay.scenario import SHIPPED_DIR, read_scenario
from kvctl.replay.scenario.schema import Dist, parse_scenario

pytestmark = pytest.mark.unit

MINIMAL = {
    "name": "tiny",
    "duration_s": 2,
    "tenants": [{"name": "acme", "reads": ["public"]}],
    "agents": [{
        "name": "coder", "tenant": "acme", "sessions_per_s": 1.0,
        "context_tokens": {"mean": 100, "sd": 10}, "output_tokens": 8,
        "tools": [{"name": "grep", "wait_s": 0.1, "retention": "retain"}],
    }],
}


def _with(path: str, value) -> dict:
    """MINIMAL with the value at a dotted path (list indices as integers) replaced."""
    doc = copy.deepcopy(MINIMAL)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


def _error(doc) -> str:
    with pytest.raises(InputError) as caught:
        parse_scenario(doc, "s.yaml")
    return str(caught.value)


def test_minimal_scenario_parses():
    """The minimal document gives a frozen Scenario with its defaults filled in."""
    scenario = parse_scenario(MINIMAL, "s.yaml")
    (agent,) = scenario.agents
    assert (scenario.name, scenario.seed, scenario.system_tokens) == ("tiny", 0, 0)
    assert agent.turns == Dist("const", 1.0) and agent.tools[0].retention == "retain"
    assert scenario.tenants[0].reads == ("public",)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("duration_s", -1, "s.yaml: duration_s: -1 is outside [1e-09, None]"),
        ("duration_s", "long", "s.yaml: duration_s: expected a finite number, got 'long'"),
        ("seed", 1.5, "s.yaml: seed: expected an integer, got 1.5"),
        ("name", "", "s.yaml: name: expected a non-empty string, got ''"),
        ("agents", [], "s.yaml: agents: needs at least one agent"),
        ("agents", {"a": 1}, "s.yaml: agents: expected a list"),
        ("agents.0.tenant", "nobody", "s.yaml: agents[0].tenant: unknown tenant 'nobody'; declared: acme"),
        ("agents.0.sessions_per_s", 0, "s.yaml: agents[0].sessions_per_s: 0 is outside [1e-09, None]"),
        ("agents.0.output_tokens", {"min": 5, "max": 2}, "s.yaml: agents[0].output_tokens: max 2 < min 5"),
        ("agents.0.context_tokens", {"median": 3},
         "s.yaml: agents[0].context_tokens: a distribution is {min,max}, {mean,sd}, "
         "{dist: exponential, mean} or {dist: lognormal, median, sigma}"),
        ("agents.0.context_tokens", "many",
         "s.yaml: agents[0].context_tokens: expected a number or a distribution mapping"),
        ("agents.0.tools.0.retention", "keep",
         "s.yaml: agents[0].tools[0].retention: 'keep' is not one of retain, drop, offload, auto"),
        ("agents.0.tools.0.wait_s", {"dist": "exponential", "mean": 0},
         "s.yaml: agents[0].tools[0].wait_s.mean: 0 is outside [1e-09, None]"),
        ("agents.0.tools.0.colour", "red",
         "s.yaml: agents[0].tools[0]: unknown key 'colour'; valid: name, weight, wait_s, retention"),
        ("agents.0.forks", {"probability": 2, "branches": 3},
         "s.yaml: agents[0].forks.probability: 2 is outside [0, 1]"),
        ("agents.0.forks", {"probability": 0.5, "branches": 1},
         "s.yaml: agents[0].forks.branches: 1 is outside [2, 64]"),
        ("agents.0.forks", {"probability": 0.5, "branches": 2, "kind": "beam"},
         "s.yaml: agents[0].forks.kind: 'beam' is not one of tree-of-thought, self-consistency"),
        ("agents.0.anti_patterns", {"timestamp_head": 1.5},
         "s.yaml: agents[0].anti_patterns.timestamp_head: 1.5 is outside [0, 1]"),
        ("engine", {"pool": 5},
         "s.yaml: engine: unknown key 'pool'; valid: pool_tokens, page_size, token_budget, tau_high, "
         "eviction_policy, max_running_requests, max_context_len, default_retention, host_capacity_tokens"),
        ("events", [{"at_s": 1, "action": "reboot"}],
         "s.yaml: events[0].action: 'reboot' is not one of bump_generation, flush_cache"),
        ("tenants.0.reads", "public", "s.yaml: tenants[0].reads: expected a list"),
        ("max_sessions", 0, "s.yaml: max_sessions: 0 is outside [1, None]"),
    ],
)
def test_errors_name_the_field_path(path, value, message):
    """Each documented error is one line naming the source and the field path."""
    assert _error(_with(path, value)) == message


def test_missing_required_field_is_named():
    """A missing required field names its path."""
    doc = copy.deepcopy(MINIMAL)
    del doc["agents"][0]["output_tokens"]
    assert _error(doc) == "s.yaml: agents[0].output_tokens: missing"


def test_unknown_top_level_key_lists_the_valid_ones():
    """A typo at the top level is rejected with the valid keys, without an empty path."""
    assert _error({**MINIMAL, "agnets": []}) == (
        "s.yaml: unknown key 'agnets'; valid: name, description, seed, duration_s, "
        "max_sessions, prefix, tenants, agents, events, engine")


def test_document_that_is_not_a_mapping_is_refused():
    """A YAML list at the top level is one line, without an empty path."""
    assert _error([1, 2]) == "s.yaml: expected a mapping"


def test_yaml_syntax_error_names_the_line(tmp_path):
    """Unparseable YAML is one line naming the file and the line."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nagents: [\n  - oops: :\n")
    with pytest.raises(InputError, match=r"bad\.yaml:\d+: not valid YAML \(.+\)$"):
        read_scenario(bad)


def test_every_shipped_scenario_validates():
    """Every example scenario parses."""
    paths = sorted(SHIPPED_DIR.glob("*.yaml"))
    assert len(paths) >= 4
    for path in paths:
        assert read_scenario(path).agents


@pytest.mark.parametrize(
    ("spec", "kind"),
    [(7, "const"), ({"min": 2, "max": 9}, "uniform"), ({"mean": 50, "sd": 5}, "normal"),
     ({"dist": "exponential", "mean": 0.3}, "exponential"),
     ({"dist": "lognormal", "median": 0.6, "sigma": 0.4}, "lognormal")],
)
def test_distributions_sample_deterministically_for_a_seed(spec, kind):
    """The same seed gives the same samples; the parsed kind is the documented one."""
    dist = parse_scenario(_with("agents.0.context_tokens", spec), "s.yaml").agents[0].context_tokens
    assert dist.kind == kind
    first = [dist.sample(random.Random(42)) for _ in range(3)]
    a, b = random.Random(42), random.Random(42)
    assert [dist.sample(a) for _ in range(20)] == [dist.sample(b) for _ in range(20)]
    assert first[0] == dist.sample(random.Random(42))


def test_distribution_samples_respect_their_shape():
    """uniform stays in [min, max]; normal is truncated at 1; tokens() is a positive int."""
    rng = random.Random(1)
    uniform, normal = Dist("uniform", 2, 9), Dist("normal", 0.0, 5.0)
    assert all(2 <= uniform.sample(rng) <= 9 for _ in range(200))
    assert all(normal.sample(rng) >= 1.0 for _ in range(200))
    assert all(isinstance(t, int) and t >= 1 for t in (Dist("exponential", 0.1).tokens(rng) for _ in range(50)))


def test_distribution_means():
    """Means: const a; uniform (a+b)/2; normal a; exponential a; lognormal median e^(s^2/2)."""
    assert Dist("const", 7).mean == 7
    assert Dist("uniform", 2, 9).mean == 5.5
    assert Dist("normal", 50, 5).mean == 50
    assert Dist("exponential", 0.3).mean == 0.3
    assert Dist("lognormal", 0.6, 0.4).mean == pytest.approx(0.6 * math.exp(0.08))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("pool_tokens", "x", "s.yaml: engine.pool_tokens: expected an integer, got 'x'"),
        ("pool_tokens", 49152.5, "s.yaml: engine.pool_tokens: expected an integer, got 49152.5"),
        ("page_size", 0, "s.yaml: engine.page_size: 0 is outside [1, 65536]"),
        ("token_budget", math.nan, "s.yaml: engine.token_budget: expected an integer, got nan"),
        ("max_context_len", True, "s.yaml: engine.max_context_len: expected an integer, got True"),
        ("tau_high", 0, "s.yaml: engine.tau_high: must be above 0 (nothing would ever be admitted)"),
        ("tau_high", 1.5, "s.yaml: engine.tau_high: 1.5 is outside [0, 1]"),
        ("tau_high", math.inf, "s.yaml: engine.tau_high: expected a finite number, got inf"),
        ("default_retention", "keep",
         "s.yaml: engine.default_retention: 'keep' is not one of retain, drop, offload, auto"),
    ],
)
def test_engine_fields_are_typed_and_named(field, value, message):
    """An `engine:` override of the wrong type or range is one error naming engine.<field>."""
    doc = copy.deepcopy(MINIMAL)
    doc["engine"] = {field: value}
    assert _error(doc) == message


def test_engine_fields_come_back_typed():
    """Valid overrides are returned as EngineConfig takes them (an integral float as int)."""
    doc = copy.deepcopy(MINIMAL)
    doc["engine"] = {"pool_tokens": 49152.0, "page_size": 16, "tau_high": 0.9}
    engine = parse_scenario(doc, "s.yaml").engine
    assert engine == {"pool_tokens": 49152, "page_size": 16, "tau_high": 0.9}
    assert type(engine["pool_tokens"]) is int

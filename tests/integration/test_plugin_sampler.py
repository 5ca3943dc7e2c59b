"""One sampler, two hosts: the plugin's reading of a scheduler-shaped host equals the
embedded engine's own snapshot at the same step, field by field.

The host (plugin_support.EngineShapedScheduler) carries the embedded engine's real SGLang
objects under the Scheduler's attribute names; see its docstring for why the batches are
plain holders. Fields the plugin documents as unknowable in a real server are compared for
their unknowability instead: mapping (None), namespace labels (salted per process), the
funnel stages between `requests` and `executed_hits` (None), counters SGLang counts itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec
from engine_adapter.plugin.attach import attach
from engine_adapter.plugin.settings import PluginSettings
from plugin_support import EngineShapedScheduler

pytestmark = pytest.mark.integration


def _workload(engine) -> None:
    """Shared 40-token system prefixes, two tenants' worth of suffixes, a pool small enough
    that later requests evict earlier ones. At least 2 output tokens: a request finishes at
    the earliest one step after it arrives, so the host has seen its `Req`."""
    rng = np.random.default_rng(7)
    systems = [np.arange(1, 41), np.arange(5000, 5040)]
    for i in range(14):
        suffix = rng.integers(100_000, 200_000, size=int(rng.integers(20, 200)))
        engine.submit(RequestSpec(rid=f"r{i}", tokens=np.concatenate([systems[i % 2], suffix]),
                                  max_new_tokens=int(rng.integers(2, 12)),
                                  arrival_s=0.002 * i))


def _drive(make_engine, tree_core: str = "rust"):
    """Yield (engine snapshot, plugin snapshot) after every step of the workload."""
    engine = make_engine(pool_tokens=1024, page_size=16, token_budget=256, tree_core=tree_core)
    _workload(engine)
    host = EngineShapedScheduler(engine)
    runtime = attach(host, PluginSettings(), dp_rank=0, serve=False)
    while engine.has_work():
        host.refresh()  # before the step: requests that arrive and finish in it are known
        report = engine.step()
        host.refresh()
        done = [host.reqs_by_rid[r.rid] for r in report.finished]
        for batch in host.step_batches(done):
            runtime.tally.on_batch(batch)
        yield engine, engine.snapshot(per_node_refs=True), runtime.sample(
            None, per_node=True, now=runtime.clock())


@pytest.mark.parametrize("tree_core", ["rust", "python"])
def test_ledger_refs_and_tree_equal_the_embedded_engine_at_every_step(make_engine, tree_core):
    """Pool ledger, refcount reconciliation, tree shape and per-node columns (except the
    salted namespace label) are identical at every step boundary, on both tree cores."""
    steps = leased = nodes = 0
    for _engine, own, plugin in _drive(make_engine, tree_core):
        steps += 1
        leased = max(leased, own.refs.leases)
        nodes = max(nodes, len(own.tree_nodes))
        assert plugin.ledger == own.ledger
        assert plugin.refs == own.refs
        assert plugin.tree == own.tree
        for column in ("node_id", "parent_id", "depth", "tokens", "pages", "recorded_lock_ref",
                       "derived_lock_ref", "holders", "medium"):
            assert getattr(plugin.tree_nodes, column) == getattr(own.tree_nodes, column), column
    assert steps > 10 and leased >= 2 and nodes >= 4  # the workload exercises sharing


def _unlabeled(views):
    return [dataclasses.replace(v, namespace="") for v in views]


def test_request_views_equal_except_the_salted_namespace(make_engine):
    """Every live request is listed in the same order with the same state, sizes, prefix
    hit and lease node; the namespace is the plugin's own salted label."""
    compared = 0
    for _engine, own, plugin in _drive(make_engine):
        assert _unlabeled(plugin.requests) == _unlabeled(own.requests)
        compared += len(own.requests)
    assert compared > 0


def test_funnel_totals_equal_and_oracle_stages_are_unknown(make_engine):
    """At the end the plugin's observed funnel has the embedded engine's prompt, S_cap and
    S_runtime sums; the stages that need the content oracle are None, never 0."""
    for engine, own, plugin in _drive(make_engine):
        pass
    mine, theirs = plugin.funnel, own.funnel
    assert (mine.lengths.prompt, mine.lengths.cap, mine.lengths.runtime) == (
        theirs.lengths.prompt, theirs.lengths.cap, theirs.lengths.runtime)
    assert mine.lengths.runtime > 0
    assert mine.stage("requests").requests == theirs.stage("requests").requests == 14
    assert mine.stage("executed_hits").requests == theirs.stage("executed_hits").requests
    for name in ("authorized", "candidates", "compatible", "current_generation", "leased",
                 "mapped", "snapshot_current"):
        assert mine.stage(name).requests is None and mine.stage(name).tokens is None
    assert mine.lengths.semantic is None and plugin.mapping is None
    assert plugin.counters.requests_finished == 14
    assert plugin.counters.evicted_tokens == own.counters.evicted_tokens > 0
    assert plugin.counters.locked_eviction_rejects == own.counters.locked_eviction_rejects
    assert plugin.counters.retractions is None and plugin.counters.kv_events is None
    assert mine.is_monotone()


def test_whatif_shadow_fed_through_the_hooks_tracks_the_engine(make_engine):
    """The plugin's what-if shadow fed through `on_batch` (admissions, extend-batch inserts
    from `Req.kv.cache_protected_len`, finishes; the pool's private part from the real
    allocator's `size` and the tree's `protected_size`): no hook fails, every request is
    seen with the hit SGLang gave it, and its 1x estimate (a 1,024-token pool: shadowed at
    rate 1) is within 2 points of the measured hit rate (issue 34's target)."""
    engine = make_engine(pool_tokens=1024, page_size=16, token_budget=256)
    _workload(engine)
    host = EngineShapedScheduler(engine)
    runtime = attach(host, PluginSettings(), dp_rank=0, serve=False)
    while engine.has_work():
        host.refresh()
        report = engine.step()
        host.refresh()
        for batch in host.step_batches([host.reqs_by_rid[r.rid] for r in report.finished]):
            runtime.on_batch(batch)
    assert (runtime.failures, runtime.disabled_reason) == (0, None)
    counters = engine.snapshot().counters
    curve = runtime.whatif.curve()
    assert (curve.requests, curve.sample_rate) == (14, 1.0)
    measured = counters.hit_tokens / counters.prompt_tokens
    assert curve.measured_hit_rate == pytest.approx(measured)
    assert measured > 0.1  # the shared prefixes hit: the check below can fail
    assert abs(curve.at(1.0).hit_rate - measured) <= 0.02

"""Per-step pool peaks (kvctl/replay/peaks.py) against the sampled snapshots' ledger.

The report's peak U_KV and token_usage come from two counters every StepReport carries,
not from the timeline's samples. Here, on a small-pool scenario that evicts, retracts and
flushes the cache (examples/scenarios/lifecycle-check.yaml), a snapshot is read after
every step: the counters give the ledger's numbers exactly, except that a flush (run by the
driver between the step and the read) moves evictable to free, which lowers U_KV only. A
replay sampled every step and one sampled on a coarse grid report the same peaks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_adapter.snapshot import token_usage_of, u_kv_of
from kvctl.replay.runner import ReplaySettings, prepare, run

pytestmark = pytest.mark.integration

SCENARIO = str(Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "lifecycle-check.yaml")


@pytest.fixture(scope="module")
def every_step():
    """(report, ledger after the driver) for every step of the scenario, read directly."""
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.workload import drive

    prepared = prepare(ReplaySettings(workload=SCENARIO))
    engine = EmbeddedEngine(prepared.config)
    seen = []
    drive(engine, prepared.driver,
          on_step=lambda report: seen.append(
              (report, engine.snapshot(requests=False, reconcile_refs=False).ledger)))
    return seen


def test_step_counters_are_the_ledgers_free_and_evictable(every_step):
    """free + evictable equal at every step; free equal at every step but the flush's."""
    assert len(every_step) > 100
    assert all(r.free_tokens + r.evictable_tokens == led.free_tokens + led.evictable_tokens
               for r, led in every_step)
    moved = [(r, led) for r, led in every_step if r.free_tokens != led.free_tokens]
    assert len(moved) == 1  # the scenario's one flush_cache event
    report, ledger = moved[0]
    assert ledger.free_tokens > report.free_tokens and ledger.evictable_tokens == 0


def test_step_gauges_are_the_ledgers_bit_for_bit_where_no_flush_ran(every_step):
    """u_kv_of / token_usage_of on the step's counters == the snapshot ledger's properties."""
    for report, ledger in every_step:
        usage = token_usage_of(ledger.pool_tokens, report.free_tokens, report.evictable_tokens)
        assert usage == ledger.token_usage
        if report.free_tokens == ledger.free_tokens:
            assert u_kv_of(ledger.pool_tokens, report.free_tokens) == ledger.u_kv


def test_report_peaks_are_every_steps_whatever_the_sampling(every_step):
    """Sampled every step or every 1 s of virtual time: the same peaks, the maxima over
    every step's gauges, and at least every sampled row's (the coarse rows miss one)."""
    u_kv = max(u_kv_of(led.pool_tokens, r.free_tokens) for r, led in every_step)
    usage = max(led.token_usage for _, led in every_step)
    exact = run(prepare(ReplaySettings(workload=SCENARIO)), timeline_every_s=0.0)
    coarse = run(prepare(ReplaySettings(workload=SCENARIO)), timeline_every_s=1.0)
    assert exact.report.utilization.sample_every_s == 0.0
    assert coarse.report.utilization.sample_every_s == 1.0
    assert coarse.report.utilization.samples < exact.report.utilization.samples / 10
    for result in (exact, coarse):
        utilization = result.report.utilization
        assert (utilization.peak_kv_utilization, utilization.peak_token_usage) == (u_kv, usage)
        assert utilization.peak_kv_utilization >= max(row.u_kv for row in result.timeline)
        assert utilization.peak_token_usage >= max(row.token_usage for row in result.timeline)
    assert max(row.u_kv for row in exact.timeline) == u_kv == 1.0  # the pool filled: eviction ran
    # token_usage's peak (every step's maximum, computed above from the ledgers) sits below
    # 1.0 under SGLang's admission (it keeps a few pages free); the every-step rows reach
    # it, the 1 s grid's rows miss it, and the report keeps it
    assert max(row.token_usage for row in exact.timeline) == usage
    assert max(row.token_usage for row in coarse.timeline) < usage


def test_report_means_are_every_steps_integral_whatever_the_sampling(every_step):
    """Mean U_KV and token_usage: each step's end state held until the next step's end,
    integrated over virtual time; the same for the every-step and the 1 s timelines."""
    from kvctl.replay.peaks import PoolPeaks

    pool = every_step[0][1].pool_tokens
    gauges = PoolPeaks(pool)
    exact = run(prepare(ReplaySettings(workload=SCENARIO)), timeline_every_s=0.0)
    coarse = run(prepare(ReplaySettings(workload=SCENARIO)), timeline_every_s=1.0)
    first = exact.timeline[0]
    gauges.observe(first.free_tokens, first.evictable_tokens, first.virtual_time_s)
    for report, _ in every_step:
        gauges.observe(report.free_tokens, report.evictable_tokens, report.clock_s)
    last = exact.timeline[-1]
    gauges.observe(last.free_tokens, last.evictable_tokens, last.virtual_time_s)
    span = last.virtual_time_s - first.virtual_time_s
    assert span > 0
    for result in (exact, coarse):
        utilization = result.report.utilization
        assert utilization.mean_kv_utilization == pytest.approx(gauges.mean_u_kv, rel=1e-12)
        assert utilization.mean_token_usage == pytest.approx(gauges.mean_token_usage, rel=1e-12)
    assert 0 < exact.report.utilization.mean_token_usage < exact.report.utilization.peak_token_usage

"""The direct cache path makes SGLang's calls: proof against the ScheduleBatch path.

Each workload (the shipped Mooncake trace and every shipped scenario, cut with a limit, at a
pool small enough to evict) is replayed three times on fresh engines with the same salt:

    exact   EngineConfig(exact_batches=True): SGLang's ScheduleBatch.prepare_for_extend /
            check_decode_mem / retract_decode / prepare_for_decode every step (the oracle)
    direct  the direct cache path (embedded/cache_ops.py), one decode step per step
    jump    the direct path with event-driven decode jumps, a prefill round's decode step
            merged into the jump after it when no round would run in between (what
            `kvctl replay` runs: `EmbeddedEngine.merge_check`)

`tests/integration/call_log.py` wraps the cache-changing methods of the engine's own
SGLang tree, allocator and row pool, and records the engine's calls into SGLang's
scheduling classes (SchedulePolicy.calc_priority with the queue order it leaves, each
PrefillAdder with its new_token_ratio and budgets, each add_chunked_req / add_one_req with
its verdict and extend). What each comparison means:

- exact vs direct: the complete call lists are equal: every tree, allocator and row-pool
  call, in order, with equal arguments (tensor values included, so the same page ids) and
  equal results.
- exact vs jump: a jump replaces k single-step `alloc_decode` calls (and their no-op
  capacity checks) by one `alloc_extend` call, taken only over spans in which the single
  step path calls no tree method (jumps.py's conditions) and would run no prefill
  round (nothing waits, or SGLang's batch_is_full holds, and no chunk is in progress). The
  page *ids* a request gets may then differ, never their number. So the comparison is: the
  tree's call list is equal with each tensor argument replaced by its length (same keys,
  touches, lock/unlock nodes, eviction requests and results, insert lengths); the
  scheduling-class calls are equal (the same rounds, queue orders, ratios and verdicts);
  the allocator hands out the same number of tokens in total; and every request finishes
  with the same hit, output ids, TTFT, queue time and inter-token latencies.
- all three: the same counters (evictions, evicted tokens, retractions, hits, steps, virtual
  time) and a clean final integrity check (SGLang's sanity_check included when idle).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.integration.call_log import CallLog, scheduling

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl")
SCENARIOS = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))
# (workload, limit, pool tokens or None for the workload's own); each pool evicts.
CASES = [(TRACE, 100, 150_000), (TRACE, 100, None)] + [
    (str(path), 8, 3_072 if path.stem == "lifecycle-check" else 16_384) for path in SCENARIOS
]


def replay(workload: str, limit: int, pool: int | None, mode: str) -> dict:
    import torch

    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.workload import drive
    from kvctl.replay.runner import ReplaySettings, prepare

    prepared = prepare(ReplaySettings(workload=workload, limit=limit, pool_tokens=pool,
                                      exact_batches=mode == "exact"))
    config = dataclasses.replace(prepared.config, decode_jumps=mode == "jump", namespace_salt="fixed")
    engine = EmbeddedEngine(config)
    if mode == "jump":  # as `kvctl replay` runs: a round's decode step may start the jump
        engine.merge_check = lambda before_s, after_s: True
    log = CallLog().attach(engine)
    records = {}

    def collect(report) -> None:
        for r in report.finished:
            records[r.rid] = (r.hit_tokens, r.output_ids.tolist(), r.ttft_s, r.itl_s.tolist(), r.queue_s)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        drive(engine, prepared.driver, on_step=collect)
    finally:
        torch.set_num_threads(threads)
    snap = engine.check_integrity()  # raises IntegrityError on any violation
    c = snap.counters
    return {
        "log": log, "records": records,
        "counters": (c.evictions, c.evicted_tokens, c.retractions, c.requests_finished,
                     snap.funnel.hit_tokens, c.steps, snap.virtual_time_s, c.admission_deferrals,
                     c.allocation_failures),
    }


@pytest.mark.parametrize(("workload", "limit", "pool"), CASES, ids=lambda v: Path(str(v)).stem if isinstance(v, str) else str(v))
def test_direct_path_makes_the_schedule_batch_calls(workload, limit, pool):
    """exact == direct call for call (SGLang's scheduling classes included); exact ~ jump
    as the module docstring defines."""
    exact, direct, jump = (replay(workload, limit, pool, m) for m in ("exact", "direct", "jump"))
    assert exact["counters"][0] > 0, "the pool must evict for this comparison to mean anything"
    assert scheduling(exact["log"].full()), "the scheduling classes must have been called"
    assert direct["log"].full() == exact["log"].full()
    assert jump["log"].tree_view() == exact["log"].tree_view()
    assert scheduling(jump["log"].full()) == scheduling(exact["log"].full())
    assert jump["log"].tokens_taken == exact["log"].tokens_taken
    assert direct["counters"] == exact["counters"] == jump["counters"]
    assert direct["records"] == exact["records"] == jump["records"]

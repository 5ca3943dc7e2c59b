"""With SGLang's HiCache on, the direct cache path makes the ScheduleBatch path's calls.

The sibling of test_replay_call_fidelity.py (its CallLog, its comparison of `exact` and
`direct`), with the HiCache calls recorded too: on the tree `init_load_back`, `load_back`,
`ready_to_load_host_cache`, `check_hicache_events`, `writing_check`, `loading_check`,
`evict_host`; on SGLang's cache controller `write`, `load`, `start_writing`,
`start_loading`, `evict_host`; on the host pool `alloc` and `free`. Both paths must make
the same calls, in order, with equal arguments and results (host slot ids included).
Decode jumps are off with HiCache (kvctl/replay/hicache_options.py), so there is no `jump`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.integration.call_log import CallLog, scheduling

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl")
TREE_HICACHE = ("init_load_back", "load_back", "ready_to_load_host_cache",
                "check_hicache_events", "writing_check", "loading_check", "evict_host")
CONTROLLER = ("write", "load", "start_writing", "start_loading", "evict_host")


def twice_trace(tmp_path: Path) -> str:
    """Eight 2,048-token prompts, then the same eight (test_replay_hicache.py's trace)."""
    rows = [{"timestamp": 2000 * n, "input_length": 2048, "output_length": 4,
             "hash_ids": [100 * (n % 8) + k for k in range(4)]} for n in range(16)]
    path = tmp_path / "twice.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def replay(workload: str, limit: int | None, pool: int, ratio: float, policy: str, exact: bool):
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.workload import drive
    from kvctl.replay.runner import ReplaySettings, prepare

    prepared = prepare(ReplaySettings(workload=workload, limit=limit, pool_tokens=pool,
                                      exact_batches=exact, hicache_ratio=ratio,
                                      hicache_write_policy=policy))
    engine = EmbeddedEngine(dataclasses.replace(prepared.config, namespace_salt="fixed"))
    log = CallLog().attach(engine)
    tree = engine.sglang_components().tree_cache
    for name in TREE_HICACHE:
        log._wrap("tree", tree, name)
    for name in CONTROLLER:
        log._wrap("controller", tree.cache_controller, name)
    for name in ("alloc", "free"):
        log._wrap("host", tree.full_kv_pool_host, name)
    records = {}

    def collect(report) -> None:
        for r in report.finished:
            records[r.rid] = (r.hit_tokens, r.output_ids.tolist(), r.ttft_s, r.queue_s)

    drive(engine, prepared.driver, on_step=collect)
    engine.settle_transfers()
    snap = engine.check_integrity()
    return log.full(), records, snap


@pytest.mark.parametrize(("trace", "limit", "pool", "ratio", "policy"), [
    ("twice", None, 4_096, 4.0, "write_through"),
    ("twice", None, 4_096, 4.0, "write_back"),
    ("conversation", 300, 60_000, 4.0, "write_through"),
], ids=["twice-write_through", "twice-write_back", "conversation-write_through"])
def test_direct_path_makes_the_schedule_batch_hicache_calls(tmp_path, trace, limit, pool,
                                                             ratio, policy):
    """exact == direct, call for call, HiCache calls included; host hits happened."""
    workload = twice_trace(tmp_path) if trace == "twice" else TRACE
    exact_calls, exact_records, exact_snap = replay(workload, limit, pool, ratio, policy, True)
    direct_calls, direct_records, direct_snap = replay(workload, limit, pool, ratio, policy, False)
    assert exact_snap.hicache.loaded_tokens > 0, "a load-back must happen for this to mean anything"
    assert any(c[1] == "init_load_back" for c in exact_calls)
    assert scheduling(exact_calls)
    assert direct_calls == exact_calls
    assert direct_records == exact_records
    assert direct_snap.hicache == exact_snap.hicache

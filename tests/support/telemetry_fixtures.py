"""Test support (tests/support, imported as `support.telemetry_fixtures`; no product code
imports it): hand-built Snapshots, a fixed-sequence SnapshotSource and an exporter
subprocess.

`seed_snapshot()` builds a real `Snapshot` carrying the worked numbers of seed 000
0x0CF (funnel 12 >= 11 >= 9 >= 7 >= 6 >= 6 >= 5 >= 4 >= 4, built by the real FunnelRecorder
from what happened to each request; ledger 12 = 3 free + 2 evictable
+ 5 live + 2 reserved/copying; delta_ref = 9 - 9 = 0; L_map = 0), so collector tests can
assert exact sample values. `FixedSnapshotSource` replays a fixed list of snapshots; it is a
stand-in for the embedded engine's live run where a test must not depend on the engine, and
never what `kvctl exporter` serves. `ExporterProcess` runs the real `kvctl exporter` command
as a child process and reads the address it announces.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Sequence

from engine_adapter.funnel import Funnel
from engine_adapter.instrument.funnel_recorder import AdmissionFacts, FunnelRecorder
from engine_adapter.receipts import Receipt
from engine_adapter.snapshot import (
    Counters,
    EngineInfo,
    MappingLag,
    PoolLedger,
    RefReconciliation,
    RequestView,
    Snapshot,
    TreeStats,
)

# seed 000 0x0CF "The checked synthetic counts", told as what happened to each of 12
# requests (the seed's counts 12 >= 11 >= 9 >= 7 >= 6 >= 6 >= 5 >= 4 >= 4 are the
# recorder's cumulative result, not typed in): one unauthorized, two index misses, two in
# an incompatible namespace, one stale generation, one waiting on a reload (mapping lag),
# one whose snapshot went stale, four executed hits.
SEED_OUTCOMES: tuple[tuple[str, int], ...] = (
    ("unauthorized_namespace", 1), ("index_miss", 2), ("incompatible_namespace", 2),
    ("stale_generation", 1), ("mapping_lag", 1), ("stale_snapshot", 1), ("executed", 4),
)
# Each request: a 100-token prompt, S_cap = 99 (seed 000 0x07A: one token kept for the
# logits), and a 64-token cached prefix wherever a stage finds one.
PROMPT_TOKENS, CAP_TOKENS, PREFIX_TOKENS = 100, 99, 64


def _facts(outcome: str) -> AdmissionFacts:
    """The facts an engine would record for a request that ends at `outcome`."""
    order = ("unauthorized_namespace", "index_miss", "incompatible_namespace",
             "stale_generation", "mapping_lag", "stale_snapshot", "executed")
    reached = order.index(outcome)  # gates passed before the one that failed
    prefix = PREFIX_TOKENS
    return AdmissionFacts(
        s_prompt=PROMPT_TOKENS, s_cap=CAP_TOKENS, authorized=reached >= 1,
        s_any=prefix if reached >= 2 else 0, s_ns=prefix if reached >= 3 else 0,
        s_sem=prefix if reached >= 4 else 0, s_indexed=prefix if reached >= 4 else 0,
        leased=reached >= 4, mapped=reached >= 5, snapshot_current=reached >= 6,
        s_runtime=prefix if reached >= 6 else 0,
    )


def seed_funnel(scale: int = 1) -> Funnel:
    """The seed 000 0x0CF funnel as kvctl's FunnelRecorder builds it from SEED_OUTCOMES,
    each outcome `scale` times (stages, rejection buckets, lengths all recorder-made)."""
    recorder = FunnelRecorder()
    for outcome, count in SEED_OUTCOMES:
        for _ in range(count * scale):
            recorder.record(_facts(outcome))
    return recorder.freeze()


def seed_snapshot(seq: int = 1, **changes: object) -> Snapshot:
    """A consistent Snapshot with the seed 000 0x0CF numbers; `changes` replace fields."""
    funnel = seed_funnel()
    snapshot = Snapshot(
        seq=seq,
        virtual_time_s=12.5,
        wall_time_s=1_700_000_000.0,
        info=EngineInfo(engine="embedded", tree_core="rust", page_size=1, eviction_policy="lru",
                        pool_tokens=12, kv_pool="NoOpMHATokenToKVPool",
                        sglang_version="0.5.23", model="Llama-3-8B", bytes_per_token=131_072),
        # seed 000 0x0CF: 12 = 3 free + 2 evictable + 5 live + 2 reserved/copying
        ledger=PoolLedger(page_size=1, pool_tokens=12, free_tokens=3, evictable_tokens=2,
                          used_tokens=7, protected_tokens=5, private_tokens=2,
                          private_filled_tokens=2, host_tokens=0, host_capacity_tokens=None),
        funnel=funnel,
        # seed 000 0x0CF: delta_ref = 9 - 9 = 0
        refs=RefReconciliation(leases=2, recorded_protected_tokens=9,
                               derived_protected_tokens=9, nodes_checked=4, per_node=True),
        # seed 000 0x0CF: L_map = max(0, f_required - f_ready) = 0 on the checked path
        mapping=MappingLag(waiting_requests=0, lag_tokens=0, max_wait_seconds=0.0,
                           stalls_total=0, stall_seconds_total=0.0),
        counters=Counters(steps=40, requests_submitted=12, requests_finished=4,
                          prompt_tokens=funnel.prompt_tokens, hit_tokens=funnel.hit_tokens,
                          recomputed_tokens=funnel.recomputed_tokens, decode_tokens=64,
                          evictions=1, evicted_tokens=16),
        tree=TreeStats(nodes=5, cached_tokens=7, max_depth_tokens=5, leaves=2),
        alerts=(),
        requests=(
            # two of the 12 requests as SEED_OUTCOMES tells them: an executed hit reusing
            # its 64-token prefix, and one still waiting (no hit yet)
            RequestView(rid="r1", state="running", namespace="tenant-a",
                        prompt_tokens=PROMPT_TOKENS, output_tokens=3,
                        prefix_hit_tokens=PREFIX_TOKENS),
            RequestView(rid="r2", state="waiting", namespace="", prompt_tokens=PROMPT_TOKENS,
                        output_tokens=0, prefix_hit_tokens=0),
        ),
    )
    return dataclasses.replace(snapshot, **changes) if changes else snapshot


class FixedSnapshotSource:
    """TEST-ONLY SnapshotSource replaying a fixed sequence of real Snapshot objects.

    snapshot() returns the next snapshot and stays on the last one; `reads` counts calls.
    take_receipts() hands out `receipts` once.
    """

    read_only = True

    def __init__(self, snapshots: Sequence[Snapshot], receipts: Sequence[Receipt] = ()) -> None:
        if not snapshots:
            raise ValueError("FixedSnapshotSource needs at least one snapshot")
        self._snapshots = tuple(snapshots)
        self._receipts = list(receipts)
        self._lock = threading.Lock()
        self.reads = 0
        self.closed = False

    def snapshot(self) -> Snapshot:
        with self._lock:
            index = min(self.reads, len(self._snapshots) - 1)
            self.reads += 1
            return self._snapshots[index]

    def take_receipts(self) -> list[Receipt]:
        with self._lock:
            taken, self._receipts = self._receipts, []
            return taken

    def close(self) -> None:
        self.closed = True


class ExporterProcess:
    """TEST-ONLY: `python -m kvctl exporter ARGS --port 0 --json` as a child process.

    Entering starts it and waits (up to `startup_s`) for the JSON line announcing the
    address; `instance` is "host:port", `url` the /metrics URL. Exiting sends SIGTERM and
    waits for a clean exit; `returncode` and `stderr` are kept for assertions.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None,
                 startup_s: float = 180.0) -> None:
        self._command = [sys.executable, "-m", "kvctl", "exporter", *args, "--port", "0",
                         "--json"]
        self._env = {**os.environ, **(env or {})}
        self._startup_s = startup_s
        self.announced: dict = {}
        self.returncode: int | None = None
        self.stderr = ""

    def __enter__(self) -> ExporterProcess:
        root = Path(__file__).resolve().parents[2]
        self._process = subprocess.Popen(self._command, cwd=root, env=self._env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._process.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(self._startup_s)
        if not line or not line[0].strip():
            self.__exit__(None, None, None)
            raise RuntimeError(f"kvctl exporter did not announce its address: {self.stderr}")
        self.announced = json.loads(line[0])
        return self

    @property
    def instance(self) -> str:
        return f"{self.announced['host']}:{self.announced['port']}"

    @property
    def url(self) -> str:
        return self.announced["url"]

    def __exit__(self, *exc: object) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        try:
            _, self.stderr = self._process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            _, self.stderr = self._process.communicate(timeout=30)
        self.returncode = self._process.returncode

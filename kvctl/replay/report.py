"""The replay report: what one replay measured, as a frozen dataclass and a JSON document.

Built from the engine's final `Snapshot` (counters, funnel, ledger, refs), the sampled
timeline (U_KV and token_usage over time) and the finished requests' modeled latencies.
Every latency is *modeled* (the embedded engine's roofline virtual clock, seed 003 chunked
prefill napkin math), and the JSON keys say so.

Determinism: everything except the `wall_clock` block is a pure function of the workload,
the settings and the seed, so two replays with the same seed produce byte-identical JSON
once `wall_clock` is removed (`deterministic_json`).

Pure: no I/O, no printing.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import asdict, dataclass, field

import numpy as np

from engine_adapter.embedded.requests import FinishedRecord
from engine_adapter.snapshot import Snapshot

REPORT_VERSION = 1
WALL_CLOCK_KEY = "wall_clock"


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """p50 / p99 / mean of a modeled quantity in seconds; None when nothing was measured."""

    p50: float | None
    p99: float | None
    mean: float | None
    count: int


def percentiles(values: np.ndarray | array | list[float]) -> Percentiles:
    """Linear-interpolated p50 and p99 (numpy's default method) and the mean."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return Percentiles(p50=None, p99=None, mean=None, count=0)
    p50, p99 = np.percentile(data, [50.0, 99.0])
    return Percentiles(p50=float(p50), p99=float(p99), mean=float(data.mean()),
                       count=int(data.size))


class LatencyCollector:
    """Accumulates modeled TTFT, ITL and queueing from FinishedRecords without keeping the
    records (their output ids would pin megabytes): each record's ITL array is kept as it
    is (8 B per gap, no copy) and joined once by `summary`. Mutates only itself."""

    def __init__(self) -> None:
        self.ttft = array("d")
        self.queue = array("d")
        self._itl: list[np.ndarray] = []

    def add(self, record: FinishedRecord) -> None:
        self.ttft.append(record.ttft_s)
        self.queue.append(record.queue_s)
        if len(record.itl_s):
            self._itl.append(record.itl_s)

    @property
    def itl(self) -> np.ndarray:
        """Every gap added so far, in order (float64)."""
        if not self._itl:
            return np.empty(0, dtype=np.float64)
        if len(self._itl) > 1:
            self._itl = [np.concatenate(self._itl).astype(np.float64, copy=False)]
        return self._itl[0]

    def summary(self) -> ModeledLatency:
        return ModeledLatency(ttft_s=percentiles(self.ttft), itl_s=percentiles(self.itl),
                              queue_s=percentiles(self.queue))


@dataclass(frozen=True, kw_only=True)
class ModeledLatency:
    """Modeled (virtual clock) latencies: TTFT per request, ITL per output token gap,
    queueing = admission - arrival per request."""

    ttft_s: Percentiles
    itl_s: Percentiles
    queue_s: Percentiles


@dataclass(frozen=True, kw_only=True)
class Utilization:
    """U_KV (seed 003 eq. 8, evictable counts as used) next to SGLang's token_usage
    (evictable counts as free): peak and time-weighted mean over every step
    (kvctl/replay/peaks.py), whatever the sampling. samples / sample_every_s: the timeline's
    rows and their virtual-time grid, 0.0 when every step was sampled."""

    peak_kv_utilization: float
    mean_kv_utilization: float
    peak_token_usage: float
    mean_token_usage: float
    samples: int
    sample_every_s: float


@dataclass(frozen=True, kw_only=True)
class Integrity:
    """End-of-run integrity (engine.check_integrity) plus every sampled ledger residual."""

    ok: bool
    pool_residual_tokens: int
    max_sampled_residual_tokens: int
    delta_protected_tokens: int | None
    delta_ref_max: int | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ReplayReport:
    """One replay. `settings` and `deployment` are the header printed above the numbers."""

    workload: dict
    deployment: dict
    settings: dict
    snapshot: Snapshot
    latency: ModeledLatency
    utilization: Utilization
    integrity: Integrity
    steps: int
    notes: tuple[str, ...] = ()
    wall_clock: dict = field(default_factory=dict)
    # Requests SGLang would refuse at its door (engine_adapter/embedded/door.py), in arrival
    # order: {"rid", "prompt_tokens", "reason"} each.
    rejected: tuple[dict, ...] = ()

    @property
    def hit_rate(self) -> float:
        return self.snapshot.funnel.hit_rate or 0.0

    def to_dict(self) -> dict:
        """The JSON document (`--json`, report.json). Key order is fixed."""
        snap = self.snapshot
        c = snap.counters
        funnel = snap.funnel
        lengths = funnel.lengths
        return {
            "report_version": REPORT_VERSION,
            "workload": dict(self.workload),
            "deployment": dict(self.deployment),
            "settings": dict(self.settings),
            "requests": c.requests_finished,
            "requests_submitted": c.requests_submitted,
            "rejected": {"requests": len(self.rejected), "list": [dict(r) for r in self.rejected]},
            "prompt_tokens": funnel.prompt_tokens,
            "hit_tokens": funnel.hit_tokens,
            "hit_rate": funnel.hit_rate or 0.0,
            "recomputed_tokens": funnel.recomputed_tokens,
            "output_tokens": c.decode_tokens,
            "evicted_tokens": c.evicted_tokens,
            "evictions": c.evictions,
            "retractions": c.retractions,
            "retracted_tokens": c.retracted_tokens,
            **_host_tiers(snap),
            "offloaded_bytes": c.offload_bytes,
            "reloaded_bytes": c.reload_bytes,
            "offloaded_tokens": c.offloaded_tokens,
            "reloaded_tokens": c.reloaded_tokens,
            "mapping_lag_stalls": snap.mapping.stalls_total,
            "mapping_lag_stall_seconds": snap.mapping.stall_seconds_total,
            "admission_deferrals": c.admission_deferrals,
            "allocation_failures": c.allocation_failures,
            "locked_eviction_rejects": c.locked_eviction_rejects,
            "peak_kv_utilization": self.utilization.peak_kv_utilization,
            "mean_kv_utilization": self.utilization.mean_kv_utilization,
            "peak_token_usage": self.utilization.peak_token_usage,
            "mean_token_usage": self.utilization.mean_token_usage,
            "utilization_samples": self.utilization.samples,
            "utilization_sample_every_s": self.utilization.sample_every_s,
            "funnel": {
                "stages": [{"name": s.name, "requests": s.requests, "tokens": s.tokens}
                           for s in funnel.stages],
                "rejections": [{"reason": r.reason, "requests": r.requests, "tokens": r.tokens}
                               for r in funnel.rejections],
                "lengths": {"S_prompt": lengths.prompt, "S_sem": lengths.semantic,
                            "S_indexed": lengths.indexed, "S_cap": lengths.cap,
                            "S_runtime": lengths.runtime, "S_recompute": lengths.recompute},
            },
            "modeled_latency": asdict(self.latency),
            "alerts_at_end": [{"name": a.name, "severity": a.severity, "evidence": a.evidence}
                              for a in snap.alerts],
            "integrity_ok": self.integrity.ok,
            "integrity": {**asdict(self.integrity), "problems": list(self.integrity.problems)},
            "virtual_time_s": snap.virtual_time_s,
            "steps": self.steps,
            "notes": list(self.notes),
            WALL_CLOCK_KEY: dict(self.wall_clock),
        }


def _host_tiers(snap: Snapshot) -> dict:
    """SGLang's HiCache figures under `hicache` when the replay ran it; no key otherwise.
    (`offloaded_*` / `reloaded_*` below are kvctl's modeled host tier, host_tier.py.)"""
    from kvctl.replay.hicache_options import hicache_block

    block = hicache_block(snap)
    return {} if block is None else {"hicache": block}


def deterministic_json(document: dict) -> str:
    """The report JSON without its wall-clock block: equal for equal seeds."""
    stripped = {k: v for k, v in document.items() if k != WALL_CLOCK_KEY}
    return json.dumps(stripped, indent=2, sort_keys=True)

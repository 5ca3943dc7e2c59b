"""The twin's prediction: the same trace through `kvctl replay` with the server's settings.

    records ──server rule──> rejected (counted, not replayed: SGLang refuses them at the door)
            └─────────────> kept ──arrivals / speedup──> twin.jsonl (+ its block size)
                                 ──ReplaySettings(**server_settings_to_replay_options)──>
                                 kvctl.replay.runner.run ──> per-request hit tokens, TTFT,
                                                              finish; the replay report

It reads only the trace and the server's settings (settings_map.py), never what the drive
measured. Per-request outcomes come from the engine's FinishedRecords, collected by a thin
wrapper around the trace's driver (`_Collecting`); the report is the replay's own.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kvctl.replay.engine_setup import Deployment
from kvctl.replay.mooncake import MooncakeRecord
from kvctl.twin.server_probe import ServerProfile
from kvctl.twin.settings_map import server_settings_to_replay_options, unmapped_settings


@dataclass(frozen=True, kw_only=True)
class Predicted:
    """One request as the replay served it (virtual seconds from the first arrival)."""

    line: int
    prompt_tokens: int
    output_tokens: int
    hit_tokens: int
    ttft_s: float
    e2e_s: float
    finished_s: float


@dataclass(frozen=True, kw_only=True)
class Prediction:
    requests: tuple[Predicted, ...]
    rejected: tuple[tuple[int, str], ...]  # (trace line, why the server's rule refuses it)
    report: dict | None  # the replay's report document; None when every request was refused
    options: dict  # the ReplaySettings fields taken from the server
    unmapped: dict  # server settings the replay has no option for


class _Collecting:
    """The trace's driver, plus every FinishedRecord the engine reports (drive() hands each
    step's report to `after_step`). Everything else is the wrapped driver's."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.finished: list = []

    def after_step(self, engine, report) -> None:
        self.finished.extend(report.finished)
        self._inner.after_step(engine, report)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def predict(records: list[MooncakeRecord], profile: ServerProfile, *, speedup: float = 1.0,
            deployment: Deployment = Deployment(), seed: int = 0,
            on_progress=None, cost_model=None) -> Prediction:
    """Replay `records` as the server would take them (module docstring). `cost_model`: the
    clock (clock.py: a StepCostModel fitted to the server), None for the roofline."""
    from kvctl.replay.runner import ReplaySettings, prepare, run

    rejected, kept = [], []
    for record in records:
        why = profile.rejects(record.input_length, record.output_length)
        if why:
            rejected.append((record.line, why))
        else:
            kept.append(record)
    options = server_settings_to_replay_options(profile.info)
    unmapped = unmapped_settings(profile.info)
    if not kept:
        return Prediction(requests=(), rejected=tuple(rejected), report=None, options=options,
                          unmapped=unmapped)
    with tempfile.TemporaryDirectory(prefix="kvctl-twin-") as folder:
        trace = Path(folder) / "twin.jsonl"
        _write_trace(trace, kept, speedup)
        settings = ReplaySettings(workload=str(trace), deployment=deployment, seed=seed,
                                  label="twin", cost_model=cost_model, **options)
        prepared = prepare(settings)
        collector = _Collecting(prepared.driver)
        result = run(dataclasses.replace(prepared, driver=collector), on_progress=on_progress)
    arrivals = {index: record for index, record in enumerate(kept, start=1)}
    predicted = []
    for finished in collector.finished:
        record = arrivals[int(finished.rid.removeprefix("mc-"))]
        arrival = record.arrival_s / speedup
        predicted.append(Predicted(
            line=record.line, prompt_tokens=finished.prompt_tokens,
            output_tokens=len(finished.output_ids), hit_tokens=finished.hit_tokens,
            ttft_s=finished.ttft_s, e2e_s=finished.finish_s - arrival,
            finished_s=finished.finish_s))
    predicted.sort(key=lambda p: p.line)
    return Prediction(requests=tuple(predicted), rejected=tuple(rejected),
                      report=result.report.to_dict(), options=options, unmapped=unmapped)


def _write_trace(path: Path, records: list[MooncakeRecord], speedup: float) -> None:
    """The kept records, arrivals divided by `speedup`, and a sidecar with their block size
    (trace_blocks.py); line i of the file is records[i - 1]."""
    rows = ({"timestamp": record.arrival_s * 1000.0 / speedup,
             "input_length": record.input_length, "output_length": record.output_length,
             "hash_ids": list(record.hash_ids)} for record in records)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    sidecar = path.with_name("twin.meta.json")
    sidecar.write_text(json.dumps({"block_tokens": records[0].block_tokens}), encoding="utf-8")

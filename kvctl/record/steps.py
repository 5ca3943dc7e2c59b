"""The timed scheduler steps `kvctl record` keeps next to its trace: `NAME.steps.json`, the
same samples `kvctl calibrate` fits (the plugin's /step_samples), so a recording can be
calibrated later (`kvctl calibrate --from NAME.steps.json`).

    {"kind": "kvctl-step-samples", "format_version": 1, "clock": "...", "lost": 0,
     "restarts": 0, "samples": {"fields": [...], "rows": [[...], ...]}}

`StepTap.start` returns a tap that does nothing when the server's plugin has no
/step_samples (an older kvctl there): the recording goes on, the sidecar is not written, and
`note` says why. A poll that fails later is counted, never fatal to the recording.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine_adapter.plugin.step_route import CLOCK
from engine_adapter.step_samples import StepSample, decode_samples, encode_samples
from kvctl.errors import KvctlError

KIND = "kvctl-step-samples"
FORMAT_VERSION = 1


def steps_path(trace: str | Path) -> Path:
    """The step sidecar of `trace.jsonl` is `trace.steps.json`."""
    trace = Path(trace)
    return trace.with_name(trace.name.removesuffix(".jsonl") + ".steps.json")


class StepTap:
    """Collects the plugin's step samples while a recording runs (kvctl/calibrate/collect.py)."""

    def __init__(self, collector: Any = None, note: str | None = None) -> None:
        self.collector = collector
        self.note = note
        self.failed_polls = 0

    @classmethod
    def start(cls, plugin_url: str, token: str | None) -> StepTap:
        from kvctl.calibrate.collect import SampleCollector

        try:
            return cls(SampleCollector(plugin_url, token=token))
        except KvctlError as err:
            return cls(None, note=f"no step samples kept: {err}")

    def wrap(self, on_progress: Callable[[Any], None]) -> Callable[[Any], None]:
        """`on_progress` that also polls the step samples (once per recording poll)."""
        def both(progress: Any) -> None:
            self.poll()
            on_progress(progress)
        return both

    def poll(self) -> None:
        if self.collector is None:
            return
        try:
            self.collector.poll()
        except Exception:  # noqa: BLE001 - the trace matters more than its step samples
            self.failed_polls += 1

    @property
    def samples(self) -> list[StepSample]:
        return self.collector.samples if self.collector is not None else []

    def write_next_to(self, trace: str | Path) -> Path | None:
        """Write `NAME.steps.json` atomically; None (nothing written) without a collector."""
        from kvctl.util.atomic import write_json

        if self.collector is None:
            return None
        self.poll()  # the steps of the last requests
        path = steps_path(trace)
        write_json(path, {"kind": KIND, "format_version": FORMAT_VERSION, "clock": CLOCK,
                          "lost": self.collector.lost, "restarts": self.collector.restarts,
                          "failed_polls": self.failed_polls,
                          "samples": encode_samples(self.samples)})
        return path


def load_steps(path: str | Path) -> tuple[StepSample, ...]:
    """The samples of a `NAME.steps.json`; InputError naming the file and the problem."""
    from kvctl.calibrate.model_file import read_kvctl_document

    where = f"--from {path}"
    doc = read_kvctl_document(path, where=where, kind=KIND, version=FORMAT_VERSION,
                              what="a kvctl step-sample file",
                              hint="kvctl record writes NAME.steps.json next to its trace")
    return decode_samples(doc.get("samples"), where=where)

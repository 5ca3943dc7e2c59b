"""The twin's clock: which step-cost model times the prediction (issue 29 items 4 and 5).

    --cost-model FILE given           -> that file's model        source "file"
    else the server has kvctl's plugin -> steps timed during the drive (/step_samples, from the
                                          plugin's position when the drive starts to its end),
                                          those before the held-out mark (holdout.py) fitted
                                          (kvctl/calibrate/fit.py)   source "fitted"
    else (no plugin, or the fit is refused)
                                      -> the roofline (modeled)    source "roofline", `why` says

Only the server's step timings feed the fit: never a request's measured TTFT, latency or
cached tokens (the prediction may not see the measured per-request outcomes). The plugin is
found as `kvctl calibrate` finds it (`find_plugin`: /server_info's advertisement, or
--plugin-url); a --plugin-url given explicitly that does not answer is an InputError before
any request is sent, an advertised one that does not answer falls back to the roofline.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from engine_adapter.embedded.step_cost import StepCostModel
from engine_adapter.remote.http_fetch import Unreachable
from kvctl.errors import InputError, KvctlError

FITTED = "fitted during the drive"
POLL_S = 1.0  # the plugin's ring holds 8,192 steps: read it well before it wraps


@dataclass(frozen=True, kw_only=True)
class TwinClock:
    """What the prediction runs on. `model` None is the roofline."""

    source: str  # "file" | "fitted" | "roofline"
    model: StepCostModel | None = None
    why: str | None = None  # for the roofline: why no fitted model
    samples: int = 0  # steps collected during the drive (fitted or not)
    lost: int = 0  # steps the plugin's ring dropped between reads
    fit_steps: int | None = None  # steps offered to the fit (a first part: holdout.py)
    fit: dict = field(default_factory=dict)
    steps_s: float = 0.0  # the offered steps' measured seconds, summed
    span_s: float = 0.0  # from the first offered step's start to the last one's end

    def summary(self) -> dict:
        """The JSON `clock` document (twin_run.py puts it in the predicted block too)."""
        label = {"file": f"fitted ({self.model.source})" if self.model else "",
                 "fitted": FITTED, "roofline": "modeled (roofline)"}[self.source]
        doc = {"source": self.source, "label": label, "samples": self.samples}
        if self.fit_steps is not None:
            doc["fit_steps"] = self.fit_steps
        if self.lost:
            doc["lost_samples"] = self.lost
        if self.samples:
            doc["steps_s"], doc["span_s"] = round(self.steps_s, 3), round(self.span_s, 3)
        if self.fit:
            doc["fit"] = self.fit
        if self.why:
            doc["why"] = self.why
        return doc


def fit_summary(model: StepCostModel) -> dict:
    """R^2, median and p90 relative error, samples (empty for a hand-written model)."""
    if model.fit is None:
        return {}
    return {"samples": model.fit.samples, "r2": model.fit.r2,
            "median_rel_error": model.fit.median_rel_error,
            "p90_rel_error": model.fit.p90_rel_error}


class DriveSampler:
    """Reads the plugin's timed steps in a background thread while the drive runs.
    `start` before the first request, `finish` after the last answer; `take_mark` from the
    drive (holdout.py) reads at once and keeps how many steps were collected then (`mark`),
    and how long the read held the drive (`mark_pause_s`)."""

    def __init__(self, collector) -> None:
        self.collector = collector
        self.error: str | None = None
        self.mark: int | None = None
        self.mark_pause_s: float | None = None
        self._lock = threading.Lock()  # the collector is read from two threads
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kvctl-twin-steps", daemon=True)

    def start(self) -> DriveSampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            if not self._read():
                return

    def _read(self) -> bool:
        with self._lock:
            if self.error is not None:
                return False
            try:
                self.collector.poll()
            except (Unreachable, KvctlError) as err:
                self.error = f"the kvctl plugin stopped answering during the drive ({err})"
                return False
            return True

    def take_mark(self) -> None:
        """Read now; `mark` = the steps collected so far (None when the read failed)."""
        began = time.monotonic()
        if self._read():
            self.mark = len(self.collector.samples)
        self.mark_pause_s = time.monotonic() - began

    def finish(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is None:
            self._read()  # the steps of the last answers


def step_time(samples) -> tuple[float, float]:
    """(summed step seconds, their span): the steps cover the server's busy time when the two
    agree (the timer times every loop iteration that ran a batch, step_timer.py); a gap
    would be time the fitted clock never sees. (0, 0) without samples."""
    if not samples:
        return 0.0, 0.0
    first, last = min(samples, key=lambda s: s.seq), max(samples, key=lambda s: s.seq)
    return sum(s.wall_s for s in samples), last.end_s - (first.end_s - first.wall_s)


def start_sampler(url: str, plugin_url: str | None) -> tuple[DriveSampler | None, str | None]:
    """(a running sampler, None), or (None, why there is none). InputError when the
    --plugin-url given explicitly does not answer (the user asked for it)."""
    from kvctl.calibrate.collect import SampleCollector, find_plugin

    try:
        target = find_plugin(url, plugin_url=plugin_url)
        collector = SampleCollector(target.plugin_url)
    except InputError as err:
        if plugin_url is not None:
            raise
        return None, str(err)
    return DriveSampler(collector).start(), None


def decide(file_model: StepCostModel | None, sampler: DriveSampler | None,
           why_none: str | None, *, fitted=None,
           scope: str = "the steps timed during the drive") -> TwinClock:
    """The clock (module docstring table); `sampler` already finished. `fitted`: the steps
    the fit may see (default: every step collected; holdout.py: those before the mark),
    `scope` names them in a refusal."""
    from kvctl.calibrate.fit import fit_from_samples

    steps = sampler.collector.samples if sampler is not None else []
    lost = sampler.collector.lost if sampler is not None else 0
    offered = steps if fitted is None else list(fitted)
    if file_model is not None:
        steps_s, span_s = step_time(steps)
        return TwinClock(source="file", model=file_model, fit=fit_summary(file_model),
                         samples=len(steps), lost=lost, steps_s=steps_s, span_s=span_s)
    if sampler is None:
        return TwinClock(source="roofline", why=why_none)
    steps_s, span_s = step_time(offered)
    seen = {"samples": len(steps), "lost": lost, "steps_s": steps_s, "span_s": span_s,
            "fit_steps": None if fitted is None else len(offered)}
    if sampler.error is not None:
        return TwinClock(source="roofline", why=sampler.error, **seen)
    try:
        model = fit_from_samples(offered, source=FITTED)
    except InputError as err:
        return TwinClock(source="roofline", **seen, why=f"{scope} could not be fitted: {err}")
    return TwinClock(source="fitted", model=model, fit=fit_summary(model), **seen)

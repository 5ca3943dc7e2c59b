"""The twin's clock choice (kvctl/twin/clock.py, twin_run.clock_note): a --cost-model file wins,
else the steps timed during the drive are fitted, else the roofline with the reason.

The plugin's sample collector is replaced by `_Steps`, a list of synthetic StepSamples with
the collector's interface (the real one reads a live server's /step_samples, covered in
tests/e2e/test_e2e_twin.py); the fitter is the real one.
"""

from __future__ import annotations

import math

import pytest

from engine_adapter.embedded.step_cost import StepCostModel
from engine_adapter.remote.http_fetch import Unreachable
from kvctl.errors import InputError
from kvctl.replay.engine_setup import Deployment
from kvctl.twin import clock as twin_clock
from kvctl.twin.clock import DriveSampler, decide, start_sampler
from kvctl.twin.twin_run import clock_note
from unit.test_calibrate_fit import TRUTH, _samples

pytestmark = pytest.mark.unit


class _Steps:
    """SampleCollector's interface: `samples`, `lost`, `poll()` (raising `fail` if set)."""

    def __init__(self, samples, *, lost: int = 0, fail: Exception | None = None) -> None:
        self.samples, self.lost, self.fail, self.polls = list(samples), lost, fail, 0

    def poll(self) -> int:
        self.polls += 1
        if self.fail is not None:
            raise self.fail
        return 0


def _finished(collector) -> DriveSampler:
    sampler = DriveSampler(collector).start()
    sampler.finish()
    return sampler


def test_steps_timed_during_the_drive_are_fitted_and_predict():
    """With the plugin's steps (36 synthetic, exact): source fitted, the model's coefficients
    are the steps' own, and the fit figures are R^2 1, zero relative error."""
    clock = decide(None, _finished(_Steps(_samples(TRUTH))), None)
    assert clock.source == "fitted" and clock.samples == 36
    assert clock.model.coefficients == pytest.approx(TRUTH, rel=1e-9)
    assert clock.model.source == "fitted during the drive"
    assert clock.fit["samples"] == 36 and clock.fit["r2"] == pytest.approx(1.0)
    assert clock.fit["median_rel_error"] == pytest.approx(0.0, abs=1e-9)
    assert clock.summary()["label"] == "fitted during the drive"


def test_an_explicit_cost_model_file_wins_over_the_drive_steps():
    """--cost-model FILE: its model is the clock even when the drive's steps could be fitted."""
    given = StepCostModel(coefficients=(0.01, 0, 0, 0, 0, 0), source="server-cost.json")
    clock = decide(given, _finished(_Steps(_samples(TRUTH))), None)
    assert clock.source == "file" and clock.model is given
    assert clock.summary()["label"] == "fitted (server-cost.json)"


def test_without_the_plugin_the_roofline_says_why():
    """No sampler: the roofline, the reason carried to the summary and the note."""
    clock = decide(None, None, "http://s advertises no kvctl plugin in /server_info")
    assert (clock.source, clock.model) == ("roofline", None)
    assert clock.summary() == {"source": "roofline", "label": "modeled (roofline)",
                               "samples": 0,
                               "why": "http://s advertises no kvctl plugin in /server_info"}
    assert clock_note(clock, Deployment()).startswith(
        "predicted latencies are modeled (roofline clock for ")
    assert "because http://s advertises no kvctl plugin" in clock_note(clock, Deployment())


def test_too_few_drive_steps_fall_back_to_the_roofline():
    """3 steps cannot be fitted: the roofline, saying the fitter's refusal."""
    clock = decide(None, _finished(_Steps(_samples(TRUTH)[:3])), None)
    assert clock.source == "roofline" and clock.samples == 3
    assert clock.why.startswith("the steps timed during the drive could not be fitted: "
                                "too few step samples: 3, need at least 20")


def test_a_plugin_that_stops_answering_falls_back_to_the_roofline():
    """A read failing mid-drive: no fit on a partial window; the roofline says so."""
    clock = decide(None, _finished(_Steps(_samples(TRUTH), fail=Unreachable("refused"))), None)
    assert clock.source == "roofline"
    assert clock.why == "the kvctl plugin stopped answering during the drive (refused)"


def test_the_sampler_reads_once_more_after_the_drive(monkeypatch):
    """finish() reads the steps of the last answers even when no periodic read came."""
    monkeypatch.setattr(twin_clock, "POLL_S", 60.0)
    steps = _Steps([])
    _finished(steps)
    assert steps.polls == 1


def test_fitted_note_carries_the_fit_figures():
    """The note: where the model comes from, steps and lost steps, R^2, median, p90."""
    samples = _samples(TRUTH)
    clock = decide(None, _finished(_Steps(samples, lost=2)), None)
    busy = sum(s.wall_s for s in samples)  # 0.4 s; the synthetic steps end 1 s apart
    assert (round(busy, 1), round(35 + samples[0].wall_s, 1)) == (0.4, 35.0)
    assert clock_note(clock, Deployment()) == (
        "predicted latencies are on a step-cost model fitted during the drive (36 server "
        "steps, 2 lost: 0.4 s of step time in the 35.0 s they span, conserved by the fit); "
        "fit R^2 1.000, relative error median 0.0%, p90 0.0%")


def test_step_time_sums_the_steps_and_measures_their_span():
    """Steps ending at 1.0, 1.5, 2.5 s lasting 0.5, 0.5, 1.0 s: 2.0 s of step time in a
    2.0 s span (no gap); ending at 1, 2, 3 s lasting 0.5 s each: 1.5 s in 2.5 s (gaps). The
    clock's summary reports the drive's steps so, rounded to the millisecond."""
    from kvctl.twin.clock import step_time
    from unit.test_calibrate_fit import _sample
    from engine_adapter.step_samples import StepShape

    one = StepShape(0, 0, 0, 1, 10)

    def steps(ends, walls):
        return [_sample(i, one, w)._replace(end_s=e) for i, (e, w) in enumerate(zip(ends, walls))]

    assert step_time(steps([1.0, 1.5, 2.5], [0.5, 0.5, 1.0])) == (2.0, 2.0)
    assert step_time(steps([1.0, 2.0, 3.0], [0.5, 0.5, 0.5])) == (1.5, 2.5)
    assert step_time([]) == (0.0, 0.0)
    # decide() through summary(), against the samples it was given: _sample ends step i at
    # i s, so 36 steps span from the first one's start (0 s minus its wall time) to 35 s
    samples = _samples(TRUTH)
    summary = decide(None, _finished(_Steps(samples)), None).summary()
    assert summary["steps_s"] == round(math.fsum(s.wall_s for s in samples), 3)
    assert summary["span_s"] == round(len(samples) - 1 + samples[0].wall_s, 3)


def test_an_advertised_plugin_missing_is_the_roofline_a_given_one_is_an_error():
    """Nothing answers at the URL: without --plugin-url, (None, why); with it, InputError."""
    sampler, why = start_sampler("http://127.0.0.1:9", None)
    assert sampler is None and why.startswith("cannot reach the SGLang server")
    with pytest.raises(InputError, match="cannot reach the SGLang server"):
        start_sampler("http://127.0.0.1:9", "http://127.0.0.1:9")

"""The twin's out-of-sample rule (kvctl/twin/holdout.py with clock.py's DriveSampler and
twin_run.clock_and_judged): which steps fit the clock, which requests judge it.

Real StepSamples and the real fitter; the plugin is `_Plugin`, a collector whose reads
return the steps "completed" since the last read (the real one reads a live server's
/step_samples: tests/e2e/test_e2e_twin.py)."""

from __future__ import annotations

import math

import pytest

from kvctl.calibrate.fit import fit_from_samples
from kvctl.errors import InputError
from kvctl.twin import clock as twin_clock
from kvctl.twin.clock import DriveSampler
from kvctl.twin.holdout import SendMark, check_fit_share, every_request, first_held_out
from kvctl.twin.twin_run import clock_and_judged
from unit.test_calibrate_fit import TRUTH, _samples

pytestmark = pytest.mark.unit

OTHER = (0.004, 1.0e-05, 2e-07, 0.001, 0.0009, 1.0e-06)  # the second part's own costs


class _Plugin:
    """SampleCollector's interface; `completed` are the steps a read will return next."""

    def __init__(self) -> None:
        self.samples, self.lost, self.completed = [], 0, []

    def poll(self) -> int:
        new, self.completed = self.completed, []
        self.samples.extend(new)
        return len(new)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, math.nan, math.inf])
def test_a_share_outside_0_1_is_one_line_naming_the_option(bad):
    with pytest.raises(InputError, match=r"^--fit-share must be between 0 and 1 \(exclusive\)"):
        check_fit_share(bad)
    assert check_fit_share(0.25) == 0.25


def test_the_first_held_out_request_follows_ceil_share_times_n():
    """k = ceil(F x N) + 1, at least 2 (one request fitted) and at most N (one judged)."""
    for n, share in ((300, 0.5), (24, 0.5), (7, 0.3), (10, 0.75)):
        assert first_held_out(n, share) == math.ceil(share * n) + 1
    assert first_held_out(10, 0.99) == 10  # ceil(9.9) + 1 = 11 would hold out nothing
    assert first_held_out(10, 0.01) == 2  # at least one request's steps are fitted
    assert first_held_out(1, 0.5) is None  # nothing to hold out


def test_the_mark_fires_once_before_the_kth_send_and_holds_out_the_rest_in_send_order():
    """Lines sent 5, 2, 7, 1, 4 with k = 3: the hook runs once, when 7 (the 3rd) is about to
    be sent, and the held-out lines are those sent 3rd or later, whatever their numbers."""
    fired = []
    mark = SendMark(3, lambda: fired.append(list(mark.order)))
    for line in (5, 2, 7, 1, 4):
        mark(line)
    assert fired == [[5, 2, 7]]
    assert mark.held_out == {7, 1, 4}


def test_only_the_steps_completed_before_the_mark_are_fitted(monkeypatch):
    """36 steps complete before request 3 is sent (costs TRUTH), 36 after (costs OTHER): the
    clock is the fit of the first 36 alone (a leak of one later step would move it), the
    summary counts all 72 collected and 36 offered, and requests 3-5 are judged."""
    monkeypatch.setattr(twin_clock, "POLL_S", 60.0)  # no periodic read: only the mark's
    plugin = _Plugin()
    sampler = DriveSampler(plugin).start()
    first = _samples(TRUTH)
    later = [s._replace(seq=s.seq + len(first), end_s=s.end_s + len(first))
             for s in _samples(OTHER)]
    mark = SendMark(3, sampler.take_mark)
    plugin.completed = list(first)
    for line in (10, 11):
        mark(line)
    assert sampler.mark is None  # not yet: request 3 has not been sent
    mark(12)
    plugin.completed = list(later)  # steps of requests 3.. (and of 1-2 still running)
    for line in (13, 14):
        mark(line)
    sampler.finish()
    assert sampler.mark == len(first) and len(plugin.samples) == 72
    assert sampler.mark_pause_s >= 0.0
    clock, judged = clock_and_judged(None, sampler, None, mark, 5,
                                     plugin.samples[:sampler.mark])
    assert clock.source == "fitted"
    assert clock.model.coefficients == pytest.approx(fit_from_samples(first).coefficients)
    assert clock.model.coefficients == pytest.approx(TRUTH, rel=1e-9)
    assert clock.model.coefficients != pytest.approx(
        fit_from_samples(plugin.samples).coefficients, rel=1e-3)
    summary = clock.summary()
    assert (summary["samples"], summary["fit_steps"], clock.fit["samples"]) == (72, 36, 36)
    assert judged.lines == {12, 13, 14} and judged.out_of_sample
    assert judged.on == ("held-out requests 3-5 of 5 in send order (clock fitted on the 36 "
                         "steps completed before request 3 was sent)")


def test_too_few_steps_before_the_mark_fall_back_to_the_roofline_saying_which():
    """3 steps before the mark cannot be fitted (the fitter needs 20): the roofline, and
    `why` names the steps offered; no fit on the whole drive takes their place, and with
    nothing fitted every request is judged."""
    plugin = _Plugin()
    sampler = DriveSampler(plugin)  # not started: the mark's read and finish's are the reads
    mark = SendMark(2, sampler.take_mark)
    plugin.completed = _samples(TRUTH)[:3]
    mark(1)
    mark(2)
    plugin.completed = _samples(TRUTH)[3:]
    sampler._read()
    clock, judged = clock_and_judged(None, sampler, None, mark, 2,
                                     plugin.samples[:sampler.mark])
    assert clock.source == "roofline" and clock.summary()["fit_steps"] == 3
    assert clock.why.startswith("the 3 steps timed before request 2 was sent could not be "
                                "fitted: too few step samples: 3")
    assert clock.why.endswith("(to fit more steps and still judge TTFT out of sample: "
                              "--cost-model from another drive (--save-cost-model writes "
                              "one), a larger --fit-share, or a smaller --speedup)")
    assert judged.lines is None and judged.on == "all requests (roofline clock: nothing fitted)"


def test_a_clock_from_a_file_or_the_roofline_is_judged_on_every_request():
    """Nothing fitted here: every request judged, out of sample, the file named; a one-
    request drive fitted on its own steps is judged in sample, and says so."""
    assert every_request("file", clock_name="a.json").on == (
        "all requests (clock from a.json, another run)")
    assert every_request("file", clock_name="a.json").lines is None
    assert every_request("roofline").out_of_sample
    inside = every_request("fitted", steps=40)
    assert not inside.out_of_sample and "IN SAMPLE" in inside.on and "40 steps" in inside.on

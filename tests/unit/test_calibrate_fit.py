"""The step-cost fitter (kvctl/calibrate/fit.py): exact recovery, non-negativity, quality
figures and its refusals. Pure: synthetic samples, numpy only."""

from __future__ import annotations

import pytest

from engine_adapter.embedded.step_cost import TERMS, StepCostModel
from engine_adapter.step_samples import StepSample, StepShape, attention_pairs
from kvctl.calibrate.fit import fit_from_samples, nonnegative_lstsq
from kvctl.errors import InputError

pytestmark = pytest.mark.unit

TRUTH = (0.002, 3.5e-05, 5e-08, 0.006, 0.00035, 3.25e-06)  # seconds per unit, TERMS order


def _sample(seq: int, shape: StepShape, wall_s: float) -> StepSample:
    kind = ("mixed" if shape.extend_tokens and shape.decode_requests
            else "prefill" if shape.extend_tokens else "decode")
    return StepSample(seq, float(seq), wall_s, wall_s, kind, shape.extend_tokens,
                      shape.prefill_requests, 0, shape.prefill_attention_pairs,
                      shape.decode_requests, shape.decode_context_tokens)


def _shapes() -> list[StepShape]:
    """Prefills of 1-3 requests with varied lengths and prefixes, decodes of varied batch and
    context, a few mixed steps: every term varies independently."""
    shapes = []
    for i in range(12):
        extend = [16 + 37 * i, 5 + 11 * (i % 4)][: 1 + i % 2]
        prefix = [8 * (i % 3), 64][: len(extend)]
        shapes.append(StepShape(sum(extend), len(extend), attention_pairs(extend, prefix), 0, 0))
    for i in range(20):
        batch = 1 + i % 6
        shapes.append(StepShape(0, 0, 0, batch, batch * (40 + 13 * i)))
    for i in range(4):
        shapes.append(StepShape(100 + i, 1, attention_pairs([100 + i], [32]), 2 + i, 300 + 7 * i))
    return shapes


def _samples(coefficients) -> list[StepSample]:
    model = StepCostModel(coefficients=tuple(coefficients))
    return [_sample(i, shape, model.seconds(shape)) for i, shape in enumerate(_shapes())]


def test_exact_recovery_of_known_coefficients():
    """Samples generated from known coefficients give those coefficients back (to 1e-9
    relative), R^2 1 and zero relative error."""
    model = fit_from_samples(_samples(TRUTH), source="synthetic.json")
    assert model.coefficients == pytest.approx(TRUTH, rel=1e-9)
    assert model.fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert model.fit.median_rel_error == pytest.approx(0.0, abs=1e-9)
    assert model.fit.p90_rel_error == pytest.approx(0.0, abs=1e-9)
    assert model.fit.samples == 36
    assert model.fit.by_kind == {"decode": 20, "mixed": 4, "prefill": 12}
    assert model.source == "synthetic.json"


def test_a_zero_coefficient_is_recovered_as_zero():
    """A term that costs nothing (prefill_requests 0) fits as exactly 0, the others exactly."""
    truth = TRUTH[:3] + (0.0,) + TRUTH[4:]
    model = fit_from_samples(_samples(truth))
    assert model.coefficients[3] == 0.0
    assert model.coefficients == pytest.approx(truth, rel=1e-9, abs=1e-15)


def test_coefficients_are_never_negative():
    """Data an unconstrained fit explains with a negative decode_requests coefficient is fitted
    with that term at exactly 0 and every other term >= 0."""
    truth = TRUTH[:4] + (-0.0002,) + TRUTH[5:]
    model = fit_from_samples(_samples(truth))
    assert model.coefficients[TERMS.index("decode_requests")] == 0.0
    assert all(c >= 0 for c in model.coefficients)
    assert model.fit.r2 < 1.0


def test_nnls_matches_the_known_optimum_of_a_small_problem():
    """min ||x c - y||, c >= 0 with x = I and y = (1, -2): the optimum is c = (1, 0)."""
    import numpy as np

    solution = nonnegative_lstsq(np.eye(2), np.array([1.0, -2.0]))
    assert solution.tolist() == [1.0, 0.0]


def test_relative_errors_are_reported_per_kind():
    """Decode steps measured 25% slower than the model predicts show a 20% median decode
    error (|predicted - measured| / measured = 0.25 / 1.25); prefill steps show 0."""
    samples = _samples(TRUTH)
    model = StepCostModel(coefficients=TRUTH)
    from kvctl.calibrate.fit import quality

    slowed = [s if s.kind != "decode" else _sample(s.seq, s.shape, s.wall_s * 1.25)
              for s in samples]
    figures = quality(slowed, model.coefficients)
    assert figures.median_rel_error_by_kind["decode"] == pytest.approx(0.2)  # 0.25 / 1.25
    assert figures.median_rel_error_by_kind["prefill"] == pytest.approx(0.0, abs=1e-12)


def test_too_few_samples_are_refused():
    """19 samples: one line naming the count and the minimum."""
    with pytest.raises(InputError, match=r"too few step samples: 19, need at least 20"):
        fit_from_samples(_samples(TRUTH)[:19])


def test_no_decode_steps_are_refused():
    """Samples without decode work cannot price decoding: refused, naming the part."""
    prefills = [s for s in _samples(TRUTH) if s.decode_requests == 0] * 2
    with pytest.raises(InputError, match=r"too few steps with decode work: 0 of 24"):
        fit_from_samples(prefills)


def test_prompts_of_one_length_are_a_degenerate_fit():
    """Every prefill one request of 128 tokens: extend tokens, attention pairs and requests
    move together, and the refusal names them."""
    one = StepShape(128, 1, attention_pairs([128], [0]), 0, 0)
    samples = [_sample(i, one, 0.01) for i in range(10)]
    samples += [s for s in _samples(TRUTH) if s.kind == "decode"]
    with pytest.raises(InputError, match=r"degenerate fit: the samples do not vary "
                                         r"extend_tokens, prefill_attention_pairs, "
                                         r"prefill_requests independently \(rank 4 of 6\)"):
        fit_from_samples(samples)


def _part_totals(samples, coefficients) -> dict[str, tuple[float, float]]:
    """{part: (measured seconds, fitted seconds)} for the prefill-work and decode-only steps."""
    model = StepCostModel(coefficients=tuple(coefficients))
    totals = {"prefill": [0.0, 0.0], "decode": [0.0, 0.0]}
    for s in samples:
        part = totals["prefill" if s.extend_tokens else "decode"]
        part[0] += s.wall_s
        part[1] += model.seconds(s.shape)
    return {k: tuple(v) for k, v in totals.items()}


def _contended(samples):
    """Every 4th step 3x slower (another process held the core): right-skewed step times."""
    return [_sample(s.seq, s.shape, s.wall_s * 3.0) if s.seq % 4 == 0 else s for s in samples]


def test_the_fit_conserves_each_parts_measured_time():
    """On right-skewed step times the fitted seconds of the prefill-work steps and of the
    decode-only steps each sum to their measured total (to 1e-9), and fitted_s equals
    measured_s; the unconstrained relative fit loses time (every part's total below)."""
    import numpy as np

    from kvctl.calibrate.fit import design

    samples = _contended(_samples(TRUTH))
    model = fit_from_samples(samples)
    for measured, fitted in _part_totals(samples, model.coefficients).values():
        assert fitted == pytest.approx(measured, rel=1e-9)
    assert model.fit.fitted_s == pytest.approx(model.fit.measured_s, rel=1e-9)
    assert model.fit.measured_s == pytest.approx(sum(s.wall_s for s in samples), rel=1e-12)
    x, y = design(samples)
    free = nonnegative_lstsq(x / y[:, None], np.ones_like(y))
    for measured, fitted in _part_totals(samples, free).values():
        assert fitted < 0.95 * measured


def test_nnls_with_a_conserved_total_matches_the_known_optimum():
    """min ||c - (1, 1)|| with c1 + c2 = 3: c = (1.5, 1.5); with y = (1, -2) and c1 + c2 = 1
    the equality optimum (2, -1) is infeasible and the best non-negative one is (1, 0)."""
    import numpy as np

    total = (np.array([[1.0, 1.0]]), np.array([3.0]))
    assert nonnegative_lstsq(np.eye(2), np.array([1.0, 1.0]), conserve=total) == pytest.approx(
        [1.5, 1.5], rel=1e-12)
    one = (np.array([[1.0, 1.0]]), np.array([1.0]))
    assert nonnegative_lstsq(np.eye(2), np.array([1.0, -2.0]), conserve=one) == pytest.approx(
        [1.0, 0.0], abs=1e-12)


def test_nnls_returns_none_when_no_non_negative_point_meets_the_total():
    """c1 + c2 = -1 has no solution with c >= 0: None, not a silent unconstrained fit."""
    import numpy as np

    impossible = (np.array([[1.0, 1.0]]), np.array([-1.0]))
    assert nonnegative_lstsq(np.eye(2), np.array([1.0, 1.0]), conserve=impossible) is None


def test_parts_that_cannot_both_be_met_conserve_the_sum_of_all_steps():
    """Mixed steps (the prefill part) measured faster than decode-only steps of the same decode
    work: no c >= 0 meets both parts' totals, so the total over all steps is conserved."""
    decode = [StepShape(0, 0, 0, 2 + i % 5, (2 + i % 5) * (50 + 9 * i)) for i in range(20)]
    mixed = [StepShape(40 + 7 * i, 1 + i % 2, attention_pairs([40 + 7 * i], [i]), d.decode_requests,
                       d.decode_context_tokens) for i, d in enumerate(decode)]
    model = StepCostModel(coefficients=TRUTH)
    samples = [_sample(i, s, model.seconds(s) * 2.0) for i, s in enumerate(decode)]
    samples += [_sample(20 + i, s, model.seconds(StepShape(0, 0, 0, s.decode_requests,
                                                           s.decode_context_tokens)))
                for i, s in enumerate(mixed)]
    fitted = fit_from_samples(samples)
    assert fitted.fit.fitted_s == pytest.approx(fitted.fit.measured_s, rel=1e-9)
    totals = _part_totals(samples, fitted.coefficients)
    assert totals["prefill"][1] > totals["prefill"][0] * 1.01


def test_calibrate_prints_the_conserved_step_time():
    """kvctl calibrate's summary has the time line: the contended samples' fitted and measured
    sums (equal), and a model file without them (older) prints no such line."""
    from pathlib import Path

    from kvctl.calibrate.model_file import model_document
    from kvctl.cli.calibrate import render_fit

    samples = _contended(_samples(TRUTH))
    model = fit_from_samples(samples)
    measured = sum(s.wall_s for s in samples)
    doc = model_document(model, server={"url": "http://h:1", "lost_samples": 0})
    text = render_fit(doc, Path("m.json"))
    assert f"time: the fitted steps sum to {measured:,.2f} s, measured {measured:,.2f} s " \
           "(conserved for prefill and decode-only steps)" in text.splitlines()
    del doc["fit"]["measured_s"]
    assert "time:" not in render_fit(doc, Path("m.json"))

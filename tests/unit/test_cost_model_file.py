"""The step-cost model file (kvctl/calibrate/model_file.py): a written model loads back
exactly; every bad file is one InputError line naming the file and the problem, also at
`kvctl replay --cost-model` (exit 2, before any engine)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from engine_adapter.embedded.step_cost import TERMS, FitQuality, StepCostModel
from kvctl.calibrate.model_file import load_cost_model, model_document, write_model
from kvctl.cli.app import app
from kvctl.errors import InputError

pytestmark = pytest.mark.unit

COEFFICIENTS = (0.002, 3.5e-05, 5e-08, 0.006, 0.00035, 3.25e-06)
FIT = FitQuality(samples=525, by_kind={"decode": 460, "prefill": 65}, r2=0.64,
                 median_rel_error=0.145, p90_rel_error=0.51,
                 median_rel_error_by_kind={"decode": 0.145, "prefill": 0.148})
TRACE = "examples/traces/mooncake/conversation_trace.jsonl"


def _good() -> dict:
    return model_document(StepCostModel(coefficients=COEFFICIENTS, fit=FIT),
                          server={"url": "http://127.0.0.1:30000"})


def test_a_written_model_loads_back_exactly(tmp_path):
    """write_model then load_cost_model: the same coefficients and fit, source = file name."""
    path = tmp_path / "server-cost.json"
    write_model(path, StepCostModel(coefficients=COEFFICIENTS, fit=FIT), server={"url": "u"})
    model = load_cost_model(path)
    assert model.coefficients == COEFFICIENTS
    assert model.fit == FIT
    assert model.source == "server-cost.json"
    assert sorted(json.loads(path.read_text())["coefficients"]) == sorted(TERMS)


def _edited(**changes) -> dict:
    doc = _good()
    coefficients = dict(doc["coefficients"])
    for key, value in changes.pop("coefficients", {}).items():
        if value is None:
            coefficients.pop(key)
        else:
            coefficients[key] = value
    doc.update(changes, coefficients=coefficients)
    return doc


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not JSON"),
    (json.dumps([1, 2]), "not a kvctl step-cost model (kind must be 'kvctl-step-cost-model'"),
    (json.dumps(_edited(kind="other")), "not a kvctl step-cost model"),
    (json.dumps(_edited(format_version=2)), "format_version 2, this kvctl reads 1"),
    (json.dumps(_edited(coefficients={"intercept": None})), "coefficient 'intercept' is missing"),
    (json.dumps(_edited(coefficients={"decode_requests": -1e-4})),
     "coefficient decode_requests=-0.0001 must be a finite number >= 0"),
    (json.dumps(_edited(coefficients={"extend_tokens": "fast"})),
     "coefficient extend_tokens='fast' must be a finite number >= 0"),
    (json.dumps(_edited(coefficients={"warp_speed": 1.0})), "unknown coefficient 'warp_speed'"),
    (json.dumps(_edited(coefficients=dict.fromkeys(TERMS, 0))),
     "every coefficient is 0: every step would take no time"),
    (json.dumps(_good()).replace("0.002,", "NaN,", 1), "coefficient intercept=nan must be"),
])  # fmt: skip
def test_bad_files_are_one_line_errors(tmp_path, content, message):
    """Each bad file: InputError naming --cost-model, the path and the problem."""
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as raised:
        load_cost_model(path)
    assert str(raised.value).startswith(f"--cost-model {path}: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_missing_file_is_named(tmp_path):
    """A path that does not exist: 'no such file'."""
    with pytest.raises(InputError, match=r"--cost-model .*nope\.json: no such file"):
        load_cost_model(tmp_path / "nope.json")


def test_replay_refuses_a_bad_model_with_exit_2(tmp_path):
    """`kvctl replay TRACE --cost-model bad.json`: one line, exit 2, nothing replayed."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_edited(format_version=7)))
    result = CliRunner().invoke(app, ["replay", TRACE, "--limit", "5", "--cost-model", str(path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"kvctl: error: --cost-model {path}: format_version 7, "
                                     "this kvctl reads 1")


def test_a_fitted_model_in_memory_is_a_clock_too():
    """`replay_clock` takes a StepCostModel fitted in this process (a drive's calibration):
    labelled fitted, its note carries the fit's quality."""
    from kvctl.replay.clock import replay_clock

    clock = replay_clock(StepCostModel(coefficients=COEFFICIENTS, fit=FIT))
    assert clock.step_cost.coefficients == COEFFICIENTS
    assert clock.label == "fitted (calibrated step-cost model)"
    assert clock.note.startswith("latencies are fitted: virtual clock from the step-cost model "
                                 "(R^2 0.640, median relative error 14.5% on 525 server steps)")
    assert replay_clock(None).label == "modeled"


def test_a_file_written_before_the_time_totals_loads_with_its_fit(tmp_path):
    """A model file whose fit lacks measured_s / fitted_s (written before the fit conserved
    time) still loads its fit quality; the totals read 0 (not recorded)."""
    document = _good()
    for key in ("measured_s", "fitted_s"):
        document["fit"].pop(key)
    path = tmp_path / "old-cost.json"
    path.write_text(json.dumps(document))
    model = load_cost_model(path)
    assert model.fit == FIT
    assert (model.fit.measured_s, model.fit.fitted_s) == (0.0, 0.0)

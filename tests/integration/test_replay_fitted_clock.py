"""The replay's clock switch (engine_adapter/embedded/step_cost.py, `--cost-model`): with a
fitted model of known coefficients the embedded engine (SGLang's real cache and allocator)
advances by exactly the model's step times, and the report labels its latencies fitted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from engine_adapter.embedded.step_cost import FittedCostModel, StepCostModel
from kvctl.calibrate.model_file import write_model

pytestmark = pytest.mark.integration

#          intercept  extend   pairs   prefill req  decode req  decode context
KNOWN = (0.001, 1e-5, 1e-7, 0.002, 0.0003, 1e-6)
TRACE = "examples/traces/mooncake/conversation_trace.jsonl"


def test_a_fitted_clock_gives_the_exact_step_times(make_engine):
    """Requests a (100 prompt tokens, 4 outputs) and b (60, 2) arrive together:

        prefill  160 tokens, 2 requests, pairs 100*101/2 + 60*61/2 = 6,880
                 0.001 + 160e-5 + 6880e-7 + 2 * 0.002             = 7.288 ms
        decode   a and b, context 101 + 61 = 162: 0.001 + 2 * 0.0003 + 162e-6 = 1.762 ms
        decode   a, context 102: 1.402 ms;   decode a, context 103: 1.403 ms

    TTFT is the end of the prefill step for both; a finishes at 11.855 ms."""
    from engine_adapter.embedded.requests import RequestSpec

    engine = make_engine(step_cost=StepCostModel(coefficients=KNOWN, source="known.json"))
    assert isinstance(engine.cost, FittedCostModel)
    engine.submit(RequestSpec(rid="a", tokens=np.arange(1, 101), max_new_tokens=4))
    engine.submit(RequestSpec(rid="b", tokens=np.arange(1, 61), max_new_tokens=2))
    advanced, finished = [], {}
    while engine.has_work():
        report = engine.step()
        advanced.append(report.advanced_s)
        finished.update({record.rid: record for record in report.finished})
    assert advanced == pytest.approx([0.007288, 0.001762, 0.001402, 0.001403], abs=1e-12)
    assert finished["a"].ttft_s == pytest.approx(0.007288, abs=1e-12)
    assert finished["b"].ttft_s == pytest.approx(0.007288, abs=1e-12)
    assert finished["a"].finish_s == pytest.approx(0.011855, abs=1e-12)


def test_a_cached_prefix_is_priced_by_its_attention_reads(make_engine):
    """b (60 tokens) arrives after a (100 tokens, sharing b's 48-token page-aligned prefix)
    finished: b's prefill extends 12 tokens on a 48-token prefix, pairs 12*48 + 12*13/2 = 654:
    0.001 + 12e-5 + 654e-7 + 0.002 = 3.1854 ms."""
    from engine_adapter.embedded.requests import RequestSpec

    engine = make_engine(step_cost=StepCostModel(coefficients=KNOWN))
    engine.submit(RequestSpec(rid="a", tokens=np.arange(1, 101), max_new_tokens=1))
    engine.run_until_idle()
    start = engine.clock_s
    engine.submit(RequestSpec(rid="b", tokens=np.arange(1, 61), max_new_tokens=1,
                              arrival_s=start))
    report = engine.step()
    assert report.prefill_tokens == 12
    assert report.advanced_s == pytest.approx(0.0031854, abs=1e-12)


def test_the_roofline_stays_the_default(make_engine):
    """Without a step-cost model the engine prices steps with the roofline ('modeled')."""
    engine = make_engine()
    assert engine.cost.label == "modeled"
    assert not isinstance(engine.cost, FittedCostModel)


def test_replay_cli_labels_latencies_fitted(tmp_path):
    """`kvctl replay --cost-model F`: settings.clock is 'fitted (F)', the note names the fit,
    and the text report labels TTFT with the file name instead of 'modeled'."""
    path = tmp_path / "server-cost.json"
    write_model(path, StepCostModel(coefficients=KNOWN))
    from kvctl.cli.app import app

    args = ["replay", TRACE, "--limit", "20", "--pool-tokens", "0", "--cost-model", str(path)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["settings"]["clock"] == "fitted (server-cost.json)"
    assert doc["notes"][0].startswith("latencies are fitted: virtual clock from the step-cost "
                                      "model server-cost.json")
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "fitted TTFT p50 / p99" in text.output
    assert "fitted (server-cost.json)" in text.output
    assert "modeled TTFT" not in text.output

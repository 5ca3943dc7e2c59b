"""compare.py: the measured and predicted blocks and their agreement, on hand-made results."""

from __future__ import annotations

import pytest

from kvctl.twin import compare
from kvctl.twin.drive import DriveResult, Measured
from kvctl.twin.holdout import Judged, every_request
from kvctl.twin.predict import Predicted, Prediction

pytestmark = pytest.mark.unit


def drive_result(evicted: int | None = 32) -> DriveResult:
    """Three requests sent: two served (100 and 200 prompt tokens, 48 and 0 cached), one
    refused."""
    return DriveResult(requests=(
        Measured(line=1, prompt_tokens=100, sent_s=0.0, output_tokens=10, cached_tokens=48,
                 ttft_s=0.5, e2e_s=1.0, finished_s=1.0),
        Measured(line=2, prompt_tokens=200, sent_s=0.5, output_tokens=10, cached_tokens=0,
                 ttft_s=1.5, e2e_s=2.5, finished_s=3.0),
        Measured(line=3, prompt_tokens=9000, sent_s=0.6, rejected="HTTP 400: too long"),
    ), evicted_tokens=evicted, ttft_source="server first_token_latency", wall_s=3.1)


def prediction() -> Prediction:
    """The same two served (hits 48 and 16), the third refused by the rule."""
    return Prediction(requests=(
        Predicted(line=1, prompt_tokens=100, output_tokens=10, hit_tokens=48, ttft_s=0.25,
                  e2e_s=0.5, finished_s=0.5),
        Predicted(line=2, prompt_tokens=200, output_tokens=10, hit_tokens=16, ttft_s=0.75,
                  e2e_s=1.0, finished_s=1.5),
    ), rejected=((3, "input 9000 >= context length 8192"),), report={"evicted_tokens": 0},
        options={}, unmapped={})


def test_the_measured_block_counts_served_requests_only():
    """Prompt and hit tokens over the two served; the refused one counted as rejected;
    throughput over 0 s .. 3 s; TTFT p50 is the midpoint of 0.5 and 1.5."""
    block = compare.measured_block(drive_result())
    assert {k: block[k] for k in ("requests", "rejected", "served", "prompt_tokens",
                                  "hit_tokens", "evicted_tokens", "ttft_p50_s")} == {
        "requests": 3, "rejected": 1, "served": 2, "prompt_tokens": 300, "hit_tokens": 48,
        "evicted_tokens": 32, "ttft_p50_s": 1.0}
    assert block["hit_rate"] == 48 / 300 and block["throughput_tokens_per_s"] == 320 / 3.0


def test_the_predicted_block_has_the_same_keys_and_its_own_figures():
    """Same keys as the measured block (plus none); hit 64 of 300; span from the first
    arrival (0 s) to the last finish (1.5 s)."""
    predicted = compare.predicted_block(prediction(), 3, 0.0)
    measured = compare.measured_block(drive_result())
    assert set(predicted) <= set(measured)
    assert (predicted["hit_tokens"], predicted["rejected"], predicted["evicted_tokens"]) == (
        64, 1, 0)
    assert predicted["throughput_tokens_per_s"] == 320 / 1.5


def test_agreement_compares_request_by_request():
    """One of the two served requests has equal hit tokens (48 = 48; 0 != 16): share 0.5;
    the hit rate is 16/300 higher predicted; TTFT p50 ratio 0.5 / 1.0."""
    measured = compare.measured_block(drive_result())
    predicted = compare.predicted_block(prediction(), 3, 0.0)
    result = compare.agreement(drive_result(), prediction(), measured, predicted,
                               every_request("roofline"))
    assert result["requests_compared"] == 2 and result["hit_tokens_equal_share"] == 0.5
    assert result["hit_rate_points"] == pytest.approx(16 / 300 * 100)
    assert result["ttft_p50_ratio"] == 0.5 and result["rejected_equal"] is True


def test_latencies_are_judged_on_the_held_out_requests_hits_on_all():
    """Judged on line 2 alone (held out): TTFT 0.75 predicted against 1.5 measured (x0.5),
    end-to-end 1.0 against 2.5 (x0.4), p50 = p99 = the one value; the hit share still over
    both served requests (0.5) and the document says what was judged."""
    measured = compare.measured_block(drive_result())
    predicted = compare.predicted_block(prediction(), 3, 0.0)
    judged = Judged(lines=frozenset({2, 3}), on="held-out requests 2-3 of 3",
                    out_of_sample=True)
    result = compare.agreement(drive_result(), prediction(), measured, predicted, judged)
    assert result["judged"] == {
        "requests": 1,
        "measured": {"ttft_p50_s": 1.5, "ttft_p99_s": 1.5, "e2e_p50_s": 2.5, "e2e_p99_s": 2.5},
        "predicted": {"ttft_p50_s": 0.75, "ttft_p99_s": 0.75, "e2e_p50_s": 1.0,
                      "e2e_p99_s": 1.0}}
    assert (result["ttft_p50_ratio"], result["ttft_p99_ratio"]) == (0.5, 0.5)
    assert (result["e2e_p50_ratio"], result["e2e_p99_ratio"]) == (0.4, 0.4)
    assert result["hit_tokens_equal_share"] == 0.5 and result["requests_compared"] == 2
    assert (result["ttft_judged_on"], result["ttft_out_of_sample"]) == (
        "held-out requests 2-3 of 3", True)


def test_evictions_without_metrics_are_not_observable_not_zero():
    """A server without --enable-metrics: evicted_tokens is None in the measured block."""
    assert compare.measured_block(drive_result(evicted=None))["evicted_tokens"] is None

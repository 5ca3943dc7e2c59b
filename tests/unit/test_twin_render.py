"""The --against table (kvctl/cli/twin.py `render_twin`) says what clock timed the predicted
latencies: a line above it names the clock's label (its notes carry the fit)."""

from __future__ import annotations

import pytest
from rich.console import Console

from kvctl.cli.twin import render_twin

pytestmark = pytest.mark.unit

BLOCK = {"served": 5, "rejected": 1, "prompt_tokens": 570, "hit_tokens": 240,
         "hit_rate": 240 / 570, "evicted_tokens": 0, "ttft_p50_s": 0.5, "ttft_p99_s": 1.0,
         "e2e_p50_s": 1.0, "e2e_p99_s": 2.0, "throughput_tokens_per_s": 100.0}


JUDGED = {"requests": 2,
          "measured": {"ttft_p50_s": 7.0, "ttft_p99_s": 9.0, "e2e_p50_s": 8.0, "e2e_p99_s": 10.0},
          "predicted": {"ttft_p50_s": 3.5, "ttft_p99_s": 9.0, "e2e_p50_s": 8.0,
                        "e2e_p99_s": 10.0}}


def _text(clock: dict | None, judged_on: str = "all requests (roofline clock: nothing "
                                                "fitted)", out_of_sample: bool = True) -> str:
    predicted = dict(BLOCK) | ({"clock": clock} if clock else {})
    doc = {"trace": "t.jsonl", "server": "http://s", "speedup": 2.0, "measured": BLOCK,
           "predicted": predicted, "replay_options": {"page_size": 4},
           "notes": ["predicted latencies are on a step-cost model fitted during the drive"],
           "agreement": {"rejected_equal": True, "hit_rate_points": 0.0,
                         "hit_tokens_equal_share": 1.0, "requests_compared": 5,
                         "ttft_p50_ratio": 0.5, "ttft_p99_ratio": 1.0, "e2e_p50_ratio": 1.0,
                         "e2e_p99_ratio": 1.0, "ttft_judged_on": judged_on,
                         "ttft_out_of_sample": out_of_sample, "judged": JUDGED}}
    console = Console(width=200, record=True)
    console.print(render_twin(doc))
    return console.export_text()


def test_the_title_names_the_clock_that_timed_the_prediction():
    """A fitted clock: the first line says 'predicted latencies: fitted during the drive'."""
    text = _text({"source": "fitted", "label": "fitted during the drive", "samples": 40})
    assert text.splitlines()[0] == "predicted latencies: fitted during the drive"


def test_without_a_clock_document_the_title_claims_none():
    """An older document (no clock): no line claims a clock."""
    assert "predicted latencies:" not in _text(None)


def test_the_latency_rows_are_the_judged_requests_under_a_row_naming_them():
    """Held out: a row 'held-out requests 4-5, out of sample' heads the latency rows, which
    show the judged figures (7.00 s measured, 3.50 s predicted, x0.50), not the whole
    drive's (0.5 s); hit rows stay the whole drive's. A clock judged in sample says so."""
    text = _text({"source": "fitted", "label": "fitted during the drive", "samples": 40},
                 judged_on="held-out requests 4-5 of 5 in send order (clock fitted on the 30 "
                           "steps completed before request 4 was sent)")
    lines = text.splitlines()
    heading = next(i for i, line in enumerate(lines) if "held-out requests 4-5" in line)
    assert lines[heading].split() == ["held-out", "requests", "4-5,", "out", "of", "sample"]
    assert lines[heading + 1].split() == ["TTFT", "p50", "7.00", "s", "3.50", "s", "x0.50"]
    assert "all requests, IN SAMPLE" in _text(None, "all requests, IN SAMPLE (clock fitted "
                                                    "on all 40 steps)", out_of_sample=False)

"""`kvctl replay TRACE --against URL` on the real CPU server (tests/e2e/sglang_server.py).

Requests spaced 3 s apart are served one at a time, where the replay is exact: every
request's predicted hit tokens equal SGLang's own `cached_tokens`, and a request longer
than the server's context is refused by the server and by the twin's rule alike.

The server is this module's own, with kvctl's plugin (KVCTL_SGLANG_PLUGIN=1, as in
test_e2e_calibrate.py): the prediction's clock is fitted to the steps the plugin completed
before the held-out mark (kvctl/twin/holdout.py: request k = ceil(F x N) + 1 is sent) when
they determine a fit (concurrent traffic), says why not otherwise, and TTFT is judged on
requests k..N only.
"""

from __future__ import annotations

import json

import pytest

from e2e.kvctl_cli import kvctl
from e2e.plugin_server import started_plugin_server

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def twin_server(tmp_path_factory):
    """The e2e server's settings (page 4, context 512) plus kvctl's plugin."""
    with started_plugin_server(tmp_path_factory.mktemp("sglang-twin")) as server:
        yield server


def _write_trace(folder, rows) -> str:
    trace = folder / "twin.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": o,
                                         "hash_ids": ids}) + "\n" for t, n, o, ids in rows))
    (folder / "twin.meta.json").write_text(json.dumps({"block_tokens": 16}))
    return str(trace)

# 16-token blocks (the sidecar says so; the server's page is 4). Line 2 shares line 1's
# first 6 blocks (96 tokens), line 4 its first 3 (48), line 5 repeats line 1 (SGLang
# matches at most input - 1 = 99 tokens: 24 pages, 96), line 3 exceeds the 512-token
# context, line 6 shares nothing.
ROWS = [
    (0, 100, list(range(0, 7))),
    (3000, 120, [0, 1, 2, 3, 4, 5, 7, 8]),
    (6000, 600, list(range(20, 58))),
    (9000, 50, [0, 1, 2, 9]),
    (12000, 100, list(range(0, 7))),
    (15000, 200, list(range(60, 73))),
]


def _drive_steps(plugin_url: str):
    """The server's timed steps from now on, read by the test itself from the plugin
    (`window.poll()` after the drive): the steps the twin's clock had to work with."""
    from kvctl.calibrate.collect import SampleCollector

    return SampleCollector(plugin_url)


def _fit_of(samples):
    """What fitting these steps gives: the fit's figures, or the fitter's refusal."""
    from kvctl.calibrate.fit import fit_from_samples
    from kvctl.errors import InputError

    try:
        fit = fit_from_samples(samples).fit
    except InputError as err:
        return str(err)
    return {"samples": fit.samples, "r2": fit.r2, "median_rel_error": fit.median_rel_error,
            "p90_rel_error": fit.p90_rel_error}


def test_against_the_real_server_one_at_a_time_predicts_every_requests_hits(twin_server,
                                                                           tmp_path):
    """Measured and predicted blocks both: 5 served, 1 rejected, 240 hit tokens of 570;
    every served request's hit tokens equal; evictions read from /metrics (0 here). The
    clock follows the server's own timed steps of the drive, read here from the plugin:
    the twin saw every one of them and offered those before request 4 (ceil(0.5 x 6) + 1)
    was sent to the fit, fitted exactly when they can be fitted. Served one at a time
    (every decode batch 1, as the steps show when the machine keeps up with the 3 s
    spacing) they cannot separate the decode terms: the roofline, saying why. Latencies
    are judged on requests 4-6 (held out; the roofline fitted nothing: every request)."""
    trace = _write_trace(tmp_path, [(t, n, 4, ids) for t, n, ids in ROWS])
    window = _drive_steps(twin_server.plugin_url)
    done = kvctl("replay", trace, "--against", twin_server.url, "--json", timeout_s=600)
    window.poll()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    for block in ("measured", "predicted"):
        figures = doc[block]
        assert (figures["served"], figures["rejected"]) == (5, 1), block
        assert (figures["prompt_tokens"], figures["hit_tokens"]) == (570, 240), block
        assert figures["hit_rate"] == 240 / 570 and figures["ttft_p50_s"] > 0, block
        assert figures["ttft_p99_s"] >= figures["ttft_p50_s"], block
        assert figures["evicted_tokens"] == 0, block
    assert doc["agreement"]["hit_tokens_equal_share"] == 1.0
    assert [r["line"] for r in doc["rejected"]["measured"]] == [3]
    assert doc["rejected"]["predicted"] == [
        {"line": 3, "reason": "input 600 >= context length 512"}]
    assert doc["replay_options"]["page_size"] == 4
    clock = doc["predicted"]["clock"]
    steps = window.samples
    assert clock["samples"] == len(steps) > 0 and window.lost == 0, (clock, window.lost)
    offered = clock["fit_steps"]  # the steps completed before request 4 was sent
    assert 0 < offered < len(steps), clock  # requests 4-6 ran steps after the mark
    expected = _fit_of(steps[:offered])
    if isinstance(expected, str):  # refused: the roofline says the fitter's reason
        assert clock["source"] == "roofline" and clock["why"].startswith(
            f"the {offered:,} steps timed before request 4 was sent could not be fitted: "
            f"{expected} (to fit more steps"), clock
    else:  # requests overlapped (a slow machine): the steps determine a fit, and it is used
        assert (clock["source"], clock["fit"]) == ("fitted", pytest.approx(expected)), clock
    if max(s.decode_requests for s in steps) == 1:  # one at a time, every decode batch 1
        assert clock["source"] == "roofline", clock
    judged = doc["agreement"]
    if clock["source"] == "fitted":  # lines 4, 5, 6 are sent 4th to 6th (3 s apart)
        assert judged["ttft_judged_on"].startswith("held-out requests 4-6 of 6 in send order")
        assert judged["judged"]["requests"] == 3 and judged["ttft_out_of_sample"], judged
    else:
        assert judged["ttft_judged_on"] == "all requests (roofline clock: nothing fitted)"


# Bursts of 6 requests every 2 s, prompts of 40 to 460 tokens (some sharing 2-block
# prefixes), outputs of 4 to 26 tokens: prefill, decode batch and context all vary.
BURSTS = [(2000 * (i // 6), 40 + (97 * i) % 421, 4 + (7 * i) % 23,
           [1000 + i % 3, 2000 + i % 3] + list(range(100 * i, 100 * i + 28)))
          for i in range(24)]


def test_against_with_the_plugin_fits_the_clock_during_the_drive(twin_server, tmp_path):
    """Concurrent bursts, --fit-share 0.75: the clock is offered the server's steps
    completed before request 19 (ceil(0.75 x 24) + 1) was sent, fewer than all the drive's
    steps, and is fitted exactly when the test's own fit of those steps (read from the
    plugin) succeeds, with its figures; TTFT is then judged on the held-out requests 19-24
    (the last burst, 6 requests) and the fitted clock puts their predicted TTFT p50 within
    5x of the measured one (the H100 roofline predicted 0.06x). A host too loaded to run
    enough varied steps before the mark gets the roofline, saying why, judged on every
    request."""
    rows = [(t, n, o, ids[: -(-n // 16)]) for t, n, o, ids in BURSTS]
    window = _drive_steps(twin_server.plugin_url)
    done = kvctl("replay", _write_trace(tmp_path, rows), "--against", twin_server.url,
                 "--fit-share", "0.75", "--json", timeout_s=600)
    window.poll()
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    clock, agreement = doc["predicted"]["clock"], doc["agreement"]
    assert clock == doc["clock"]
    offered = clock["fit_steps"]
    assert 0 < offered < clock["samples"] == len(window.samples) and window.lost == 0, clock
    expected = _fit_of(window.samples[:offered])
    if isinstance(expected, str):  # too few or too uniform steps before the mark
        assert clock["source"] == "roofline" and clock["why"].startswith(
            f"the {offered:,} steps timed before request 19 was sent could not be fitted: "
            f"{expected} (to fit more steps"), clock
        assert agreement["ttft_judged_on"] == "all requests (roofline clock: nothing fitted)"
        return
    assert (clock["source"], clock["label"]) == ("fitted", "fitted during the drive"), clock
    assert clock["fit"] == pytest.approx(expected) and clock["fit"]["samples"] == offered
    assert doc["notes"][0].startswith(
        f"predicted latencies are on a step-cost model fitted during the drive ({offered:,} "
        f"of the {len(window.samples):,} server steps, those completed before the held-out "
        "mark")
    assert agreement["ttft_judged_on"] == (
        f"held-out requests 19-24 of 24 in send order (clock fitted on the {offered:,} steps "
        "completed before request 19 was sent)")
    assert agreement["ttft_out_of_sample"] and agreement["judged"]["requests"] == 6
    assert 0.2 <= agreement["ttft_p50_ratio"] <= 5.0, agreement

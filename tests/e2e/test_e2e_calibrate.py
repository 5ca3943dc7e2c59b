"""`kvctl calibrate` on the real CPU server (issue 29 item 4): kvctl's plugin, loaded by SGLang's
own `load_plugins()`, times the scheduler's real steps; traffic runs; calibrate collects them,
fits a step-cost model, prints R^2, writes the model; a replay runs on it as its clock.

The server is this module's own (KVCTL_SGLANG_PLUGIN=1, a 4,096-token pool and 2,048-token
context so prompts vary up to 900 tokens). A server without the plugin is refused in
tests/integration/test_calibrate_cli.py (one SGLang server at a time on this machine).
"""

from __future__ import annotations

import json
import random
import re
import threading

import pytest

from e2e.kvctl_cli import kvctl
from e2e.plugin_server import started_plugin_server
from e2e.sglang_server import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRACE = "examples/traces/mooncake/conversation_trace.jsonl"


@pytest.fixture(scope="module")
def calib_server(tmp_path_factory):
    with started_plugin_server(tmp_path_factory.mktemp("sglang-calibrate"),
                               extra_args=("--context-length", "2048",
                                           "--max-total-tokens", "4096"),
                               env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
                                    "KVCTL_RECORD": "1"}) as server:
        yield server


def _traffic(server, *, senders: int = 4, requests: int = 6,
             until: threading.Event | None = None) -> None:
    """Concurrent requests with varied prompt lengths (16-900 tokens), some sharing a
    prefix, and varied outputs (4-40 tokens): prefill, decode and batch sizes all vary.
    With `until`, each sender keeps going (at least `requests` each) until it is set, so
    a window that opens late (a CLI still starting) still sees traffic throughout."""
    prefixes = [[random.Random(p).randrange(1, 500) for _ in range(64 + 96 * p)]
                for p in range(3)]

    def send(index: int) -> None:
        rng = random.Random(index)
        sent = 0
        while sent < requests or (until is not None and not until.is_set()):
            sent += 1
            prefix = rng.choice(prefixes) if rng.random() < 0.5 else []
            ids = prefix + [rng.randrange(1, 500) for _ in range(rng.randrange(16, 600))]
            server.generate(ids[:900], max_new_tokens=rng.randrange(4, 40))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)


def test_calibrate_fits_the_real_servers_steps_and_the_model_drives_a_replay(calib_server,
                                                                             tmp_path):
    """Traffic runs while `kvctl calibrate --duration` collects; it prints the fit (R^2,
    errors, steps per kind), writes a model file whose fit counts prefill and decode steps,
    and `kvctl replay --cost-model` on that file labels its latencies fitted."""
    out = tmp_path / "server-cost.json"
    # The server times steps once /step_samples is read (KVCTL_PLUGIN_STEP_TIMING unset):
    # traffic runs until calibrate's window has closed, so the window sees it throughout.
    collected = threading.Event()
    traffic = threading.Thread(target=_traffic, args=(calib_server,),
                               kwargs={"until": collected})
    traffic.start()
    try:
        done = kvctl("calibrate", "--url", calib_server.url, "--out", str(out),
                     "--duration", "25s", "--interval", "0.5", "--history", timeout_s=300)
    finally:
        collected.set()
        traffic.join(600)
    assert done.returncode == 0, done.stderr
    print(done.stdout)  # the real figures, for the report (pytest -s)
    assert re.search(r"fit: R\^2 -?\d\.\d{3}   relative error median \d+\.\d%, p90 \d+\.\d%",
                     done.stdout)
    doc = json.loads(out.read_text())
    fit = doc["fit"]
    assert fit["by_kind"]["prefill"] >= 5 and fit["by_kind"]["decode"] >= 5
    assert fit["samples"] == sum(fit["by_kind"].values())
    assert doc["server"]["plugin_url"] == calib_server.plugin_url
    assert all(value >= 0 for value in doc["coefficients"].values())
    replay = kvctl("replay", TRACE, "--limit", "20", "--pool-tokens", "0", "--cost-model",
                   str(out), "--json", timeout_s=300)
    assert replay.returncode == 0, replay.stderr
    report = json.loads(replay.stdout)
    assert report["settings"]["clock"] == "fitted (server-cost.json)"
    assert report["modeled_latency"]["ttft_s"]["p50"] > 0


def test_record_keeps_the_steps_and_calibrate_fits_them(calib_server, tmp_path):
    """`kvctl record` during traffic writes NAME.steps.json next to the trace; its samples are
    the plugin's (prefill and decode steps with positive times) and `kvctl calibrate --from`
    fits them into a model file."""
    trace = tmp_path / "trace.jsonl"
    recorded = threading.Event()  # traffic runs until the recording has ended
    traffic = threading.Thread(target=_traffic, args=(calib_server,),
                               kwargs={"senders": 3, "requests": 4, "until": recorded})
    traffic.start()
    try:
        done = kvctl("record", "--url", calib_server.url, "--out", str(trace),
                     "--duration", "20s", "--json", timeout_s=300)
    finally:
        recorded.set()
        traffic.join(600)
    assert done.returncode == 0, done.stderr
    sidecar = tmp_path / "trace.steps.json"
    steps = json.loads(sidecar.read_text())
    assert json.loads(done.stdout)["step_samples"] == len(steps["samples"]["rows"])
    fields = steps["samples"]["fields"]
    kinds = {row[fields.index("kind")] for row in steps["samples"]["rows"]}
    assert {"prefill", "decode"} <= kinds
    assert all(row[fields.index("wall_s")] > 0 for row in steps["samples"]["rows"])
    out = tmp_path / "from-recording.json"
    fitted = kvctl("calibrate", "--from", str(sidecar), "--out", str(out), "--json")
    assert fitted.returncode == 0, fitted.stderr
    assert json.loads(out.read_text())["fit"]["samples"] == len(steps["samples"]["rows"])


def test_calibrate_without_traffic_is_too_few_samples(calib_server, tmp_path):
    """An idle server: one line naming the count, exit 2, no model file."""
    out = tmp_path / "idle.json"
    done = kvctl("calibrate", "--url", calib_server.url, "--out", str(out), "--duration", "2s")
    assert done.returncode == 2
    assert re.fullmatch(r"kvctl: error: too few step samples: \d+, need at least 20; .*\n",
                        done.stderr)
    assert not out.exists()


def test_calibrate_refuses_a_dead_server(tmp_path):
    """Nothing listening: one line naming --url, exit 2."""
    done = kvctl("calibrate", "--url", f"http://127.0.0.1:{free_port()}",
                 "--out", str(tmp_path / "m.json"))
    assert done.returncode == 2
    assert "kvctl: error: cannot reach the SGLang server" in done.stderr
    assert "check --url" in done.stderr

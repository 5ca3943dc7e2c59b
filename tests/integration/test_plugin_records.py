"""`kvctl record`'s stream served by the plugin itself: the recording tap wired into the
plugin's hooks (arrival in `_add_request_to_queue`, finish in `process_batch_result`) and
`GET /records` on the plugin's endpoint, over real HTTP on loopback, on a scheduler-shaped
host of the embedded engine's real SGLang objects and real `Req`s (plugin_support.py; a
real Scheduler cannot be built on this CPU machine)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec
from engine_adapter.plugin.attach import attach
from engine_adapter.plugin.hooks import after_add_request_to_queue, after_process_batch_result
from engine_adapter.plugin.settings import PluginSettings
from plugin_support import EngineShapedScheduler

pytestmark = pytest.mark.integration

MARKER = 987_650  # prompt token ids start here: no other source produces them


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _run(engine, host) -> None:
    """Step the engine to idle, calling the hooks a Scheduler would: each new Req once at
    arrival, then the step's batches with the requests that finished in it. The embedded
    engine sets a Req's namespace (cache_salt, extra_key) at admission, where SGLang has it
    from the start, so the arrival hook runs after the step that admitted it."""
    announced = host.__dict__.setdefault("announced", set())  # across calls on one host
    finished_seen = host.__dict__.setdefault("finished_seen", set())
    while engine.has_work():
        engine.step()
        host.refresh()
        for rid, req in host.reqs_by_rid.items():
            if rid not in announced:
                announced.add(rid)
                after_add_request_to_queue(None, host, req)
        done = [r for rid, r in host.reqs_by_rid.items()
                if r.finished_reason is not None and rid not in finished_seen]
        finished_seen.update(r.rid for r in done)
        for batch in host.step_batches(finished_reqs=done):
            after_process_batch_result(None, host, batch, object())


def _served(make_engine, monkeypatch, record: bool):
    if record:
        monkeypatch.setenv("KVCTL_RECORD", "1")
    else:
        monkeypatch.delenv("KVCTL_RECORD", raising=False)
    engine = make_engine(pool_tokens=8192, page_size=16)
    host = EngineShapedScheduler(engine)
    runtime = attach(host, PluginSettings(port_base=0, ledger_s=0.0), dp_rank=0)
    return engine, host, runtime


def test_records_stream_salted_block_hashes_of_requests_the_scheduler_saw(make_engine,
                                                                         monkeypatch):
    """Two prompts sharing their first 1,024 tokens and differing after, recorded in
    blocks of the server's page (16 tokens, the default): 67 and 69 blocks, equal first 64
    digests, different 65th; the lengths are the prompts' and outputs'; no token id appears
    in the body."""
    engine, host, runtime = _served(make_engine, monkeypatch, record=True)
    try:
        shared = np.arange(MARKER, MARKER + 1024)
        engine.submit(RequestSpec(rid="a", tokens=np.concatenate([shared, np.arange(5, 81)]),
                                  max_new_tokens=3))
        _run(engine, host)
        engine.submit(RequestSpec(rid="b", tokens=np.concatenate([shared, np.arange(9, 50)]),
                                  max_new_tokens=5, arrival_s=engine.clock_s))
        _run(engine, host)
        status, doc = _get(runtime.server.url + "/records")
        assert status == 200 and doc["dropped"] == 0 and doc["in_flight"] == 0
        by_length = sorted(doc["records"], key=lambda r: r["input_length"])
        assert [(r["input_length"], r["output_length"]) for r in by_length] == [
            (1065, 5), (1100, 3)]
        first, second = (r["blocks"] for r in by_length)
        assert (len(first), len(second), doc["block_tokens"]) == (67, 69, 16)
        assert first[:64] == second[:64] and first[64] != second[64]
        body = json.dumps(doc)
        assert str(MARKER) not in body and str(MARKER + 1023) not in body
        _status, after = _get(runtime.server.url + f"/records?ack={doc['next_ack']}")
        assert after["records"] == []
    finally:
        runtime.server.close()


def test_records_route_says_how_to_turn_recording_on(make_engine, monkeypatch):
    """Without KVCTL_RECORD=1 the plugin records nothing and /records is a 404 naming the
    switch (the message `kvctl record` shows)."""
    engine, host, runtime = _served(make_engine, monkeypatch, record=False)
    try:
        engine.submit(RequestSpec(rid="a", tokens=np.arange(1, 100), max_new_tokens=2))
        _run(engine, host)
        status, doc = _get(runtime.server.url + "/records")
        assert status == 404 and "KVCTL_RECORD=1" in doc["error"]
        assert runtime.recording.read().records == ()
    finally:
        runtime.server.close()

"""The plugin's endpoint over real HTTP on loopback, attached to a scheduler-shaped host of
the embedded engine's real SGLang objects (plugin_support.py).

Covers: /healthz and /snapshot before and after the first sample, the decoded snapshot
equal to what the scheduler thread published, the bearer token, a sampler exception
counted until the plugin disables itself, a schema-version mismatch refused by the client
check, and hygiene (no token ids, prompt markers or raw namespace in any body).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

from engine_adapter.embedded.requests import RequestSpec
from engine_adapter.plugin.attach import attach
from engine_adapter.plugin.hooks import after_on_idle, after_process_batch_result
from engine_adapter.plugin.settings import PluginSettings
from engine_adapter.snapshot_codec import (
    SCHEMA_VERSION,
    SchemaMismatch,
    check_schema,
    decode_receipt,
    decode_snapshot,
)
from kvctl import __version__
from plugin_support import EngineShapedScheduler

pytestmark = pytest.mark.integration

MARKER = [987_651, 987_652, 987_653, 987_654] * 8  # token ids no other source produces
SECRET_TENANT = "tenant-marker-zq81"


def _get(url: str, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def served(make_engine):
    """(engine, host, runtime) with the endpoint on a free loopback port; closed after."""
    engine = make_engine(pool_tokens=1024, page_size=16)
    host = EngineShapedScheduler(engine)
    runtime = attach(host, PluginSettings(port_base=0, ledger_s=0.0, max_failures=3), dp_rank=0)
    yield engine, host, runtime
    runtime.server.close()


def _step(engine, host) -> None:
    """One engine step, then the hook SGLang calls after process_batch_result."""
    engine.step()
    host.refresh()
    extend, _decode = host.step_batches()
    after_process_batch_result(None, host, extend, object())


def test_healthz_and_snapshot_before_the_first_sample(served):
    """Attached but no step yet: /healthz says starting, /snapshot is a 503 JSON error."""
    _engine, _host, runtime = served
    status, health = _get(runtime.server.url + "/healthz")
    assert status == 200
    assert health == {"schema_version": SCHEMA_VERSION, "kvctl_version": __version__,
                      "status": "starting", "failures": 0, "disabled_reason": None,
                      "dp_rank": 0, "steps": 0}
    status, body = _get(runtime.server.url + "/snapshot")
    assert status == 503 and "no sample yet" in body["error"]


def test_snapshot_decodes_to_what_the_scheduler_published(served):
    """After steps with a live request, /snapshot decodes (schema checked) to exactly the
    runtime's latest snapshot: ledger with protected/private, delta_ref, funnel."""
    engine, host, runtime = served
    engine.submit(RequestSpec(rid="r1", tokens=np.arange(1, 200), max_new_tokens=8))
    for _ in range(3):
        _step(engine, host)
    status, doc = _get(runtime.server.url + "/snapshot")
    assert status == 200
    check_schema(doc)
    snap = decode_snapshot(doc["snapshot"])
    assert snap == runtime.latest
    assert snap.ledger.protected_tokens is not None and snap.ledger.private_tokens > 0
    assert snap.ledger.residual_tokens == 0
    assert snap.refs.delta_ref_max == 0 and snap.refs.leases == 1
    assert snap.funnel.stage("requests").requests == 1
    status, health = _get(runtime.server.url + "/healthz")
    assert (health["status"], health["steps"]) == ("ok", 3)


def test_receipts_list_each_admission_once_with_sequence_numbers(served):
    """Two requests sharing a 64-token prefix: /receipts lists a miss then a 48-token hit
    (S_cap floors to 3 pages of 16) as `match` receipts; `after` skips what was read."""
    engine, host, runtime = served
    prefix = np.arange(1, 65)
    engine.submit(RequestSpec(rid="a", tokens=np.concatenate([prefix, [900, 901]]),
                              max_new_tokens=2))
    while engine.has_work():
        _step(engine, host)
    engine.submit(RequestSpec(rid="b", tokens=prefix.copy(), max_new_tokens=2,
                              arrival_s=engine.clock_s))
    while engine.has_work():
        _step(engine, host)
    status, doc = _get(runtime.server.url + "/receipts")
    assert status == 200 and (doc["first"], doc["next"]) == (0, 2)
    matches = [decode_receipt(r) for r in doc["receipts"]]
    assert [(r.kind, r.request, r.outcome, r.tokens) for r in matches] == [
        ("match", "a", "miss", 0), ("match", "b", "hit", 48)]
    _status, later = _get(runtime.server.url + "/receipts?after=1")
    assert [r["request"] for r in later["receipts"]] == ["b"]
    assert _get(runtime.server.url + "/receipts?after=x")[0] == 400


def test_wrong_or_missing_token_is_401(make_engine):
    """With KVCTL_PLUGIN_TOKEN set, no token and a wrong token get 401 JSON; the right one 200."""
    engine = make_engine(pool_tokens=1024, page_size=16)
    host = EngineShapedScheduler(engine)
    runtime = attach(host, PluginSettings(port_base=0, token="s3cret"), dp_rank=0)
    try:
        url = runtime.server.url + "/healthz"
        assert _get(url)[0] == 401
        status, body = _get(url, token="wrong")
        assert status == 401 and "bearer token" in body["error"]
        assert _get(url, token="s3cret")[0] == 200
    finally:
        runtime.server.close()


def test_sampler_exceptions_are_counted_then_the_plugin_disables_itself(served, monkeypatch):
    """A sampler that raises never escapes the hook; after max_failures (3) the plugin stops
    sampling, /healthz says disabled with the reason, /snapshot refuses."""
    engine, host, runtime = served
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("tree walk failed")

    monkeypatch.setattr(runtime.host, "inputs", broken)
    for _ in range(5):
        after_on_idle(None, host)  # returns normally every time
    assert len(calls) == 3
    status, health = _get(runtime.server.url + "/healthz")
    assert (health["status"], health["failures"]) == ("disabled", 3)
    assert health["disabled_reason"] == \
        "disabled after 3 failures; last: RuntimeError: tree walk failed"
    status, body = _get(runtime.server.url + "/snapshot")
    assert status == 503 and "disabled after 3 failures" in body["error"]


def test_schema_version_mismatch_is_refused(served):
    """A served document from another schema version is refused by the client's check
    with both versions named."""
    engine, host, runtime = served
    _step(engine, host)
    _status, doc = _get(runtime.server.url + "/snapshot")
    doc["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(SchemaMismatch, match=f"{SCHEMA_VERSION + 1}.*{SCHEMA_VERSION}"):
        check_schema(doc)


def test_bodies_carry_no_token_ids_prompt_or_raw_namespace(served):
    """A request with marker token ids and a marker tenant: neither the marker ids nor the
    tenant string appears in /snapshot or /healthz."""
    engine, host, runtime = served
    engine.submit(RequestSpec(rid="h1", tokens=np.asarray(MARKER, dtype=np.int64),
                              max_new_tokens=4, tenant=SECRET_TENANT))
    for _ in range(2):
        _step(engine, host)
    bodies = []
    for route in ("/snapshot", "/healthz"):
        with urllib.request.urlopen(runtime.server.url + route, timeout=10) as response:
            bodies.append(response.read().decode())
    snap = decode_snapshot(json.loads(bodies[0])["snapshot"])
    assert [v.rid for v in snap.requests] == ["h1"]  # the request is in the body
    for body in bodies:
        assert SECRET_TENANT not in body
        assert "98765" not in body

"""RecordingTap fed with SGLang's real `Req` objects, and the /records route over it.

The hooks are called here directly, as the kvctl plugin's scheduler hooks call them (the
plugin wires them at arrival and finish; this branch does not carry the plugin).
"""

from __future__ import annotations

import pytest
from record_support import abort, finish, make_req

from engine_adapter.recording.route import OFF_MESSAGE, records_response
from engine_adapter.recording.tap import RecordingTap

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _sglang(sglang_ready):
    """Every test here builds real Reqs."""


def _clock(*times: float):
    values = iter(times)
    return lambda: next(values)


def test_recording_is_off_unless_asked_for():
    """No KVCTL_RECORD: every hook is a no-op and /records answers 404 naming the switch."""
    tap = RecordingTap.from_env({})
    tap.on_request_arrival(make_req("a", [1, 2, 3]))
    assert tap.recorder.read().in_flight == 0
    assert records_response(tap, {}) == (404, {"error": OFF_MESSAGE})
    assert records_response(None, {}) == (404, {"error": OFF_MESSAGE})


def test_a_bad_block_size_turns_recording_off_with_the_fix():
    """KVCTL_RECORD_BLOCK_TOKENS=abc: off (never a crash in the server), and says so."""
    tap = RecordingTap.from_env({"KVCTL_RECORD": "1", "KVCTL_RECORD_BLOCK_TOKENS": "abc"})
    status, body = records_response(tap, {})
    assert status == 404
    assert body["error"].startswith("recording is off: KVCTL_RECORD_BLOCK_TOKENS='abc'")


@pytest.mark.parametrize("environ, page_size, expected", [
    ({"KVCTL_RECORD": "1"}, 16, 16),
    ({"KVCTL_RECORD": "1", "KVCTL_RECORD_BLOCK_TOKENS": "512"}, 16, 512),
    ({"KVCTL_RECORD": "1"}, None, 512),
])
def test_blocks_default_to_the_servers_page_size(environ, page_size, expected):
    """Unset, KVCTL_RECORD_BLOCK_TOKENS is the scheduler's page size (no sharing lost);
    set, it wins; with no page size known, Mooncake's 512."""
    tap = RecordingTap.from_env(environ, page_size=page_size)
    assert tap.enabled and tap.block_tokens == tap.read().block_tokens == expected


def test_arrival_and_finish_make_one_record_each_with_shared_prefix_ids():
    """Two prompts sharing their first 4-token block: equal first digest, different second;
    lengths from origin_input_ids and output_ids; the ack releases what the reader has."""
    tap = RecordingTap.from_env({"KVCTL_RECORD": "1", "KVCTL_RECORD_BLOCK_TOKENS": "4"},
                                clock=_clock(100.0, 100.25))
    a, b = make_req("a", [1, 2, 3, 4, 5, 6]), make_req("b", [1, 2, 3, 4, 9])
    tap.on_request_arrival(a)
    tap.on_request_arrival(b)
    finish(b, 3)
    tap.on_request_finish(b)
    finish(a, 7)
    tap.on_request_finish(a)
    status, body = records_response(tap, {"ack": "0"})
    assert status == 200 and body["schema_version"] == 1 and body["block_tokens"] == 4
    assert [(r["seq"], r["arrival_s"], r["input_length"], r["output_length"])
            for r in body["records"]] == [(1, 100.25, 5, 3), (2, 100.0, 6, 7)]
    first, second = body["records"][0]["blocks"], body["records"][1]["blocks"]
    assert len(first) == len(second) == 2 and first[0] == second[0] and first[1] != second[1]
    assert all(len(digest) == 16 for digest in first + second)  # 8-byte hex digests
    assert (body["dropped"], body["in_flight"], body["errors"], body["next_ack"]) == (0, 0, 0, 2)
    status, body = records_response(tap, {"ack": "1", "recording": tap.recording_id})
    assert [r["seq"] for r in body["records"]] == [2]


def test_arrival_time_is_the_api_servers_creation_time_when_sglang_carries_it():
    """No clock given: time_stats.created_time (set by the API server, propagated to the
    scheduler's Req) is the arrival; a Req without it gets the hook's perf_counter."""
    import time

    tap = RecordingTap(block_tokens=4)
    early, late = make_req("early", [1, 2]), make_req("late", [3, 4])
    early.time_stats.created_time = 5.25
    before = time.perf_counter()
    tap.on_request_arrival(early)
    tap.on_request_arrival(late)
    for req in (early, late):
        finish(req, 1)
        tap.on_request_finish(req)
    first, second = tap.read().records
    assert first.arrival_s == 5.25 and second.arrival_s >= before


def test_aborted_requests_are_not_part_of_the_trace():
    """A FINISH_ABORT at finish, or an explicit abort, leaves no record and nothing in flight."""
    tap = RecordingTap(block_tokens=4)
    a, b = make_req("a", [1, 2, 3]), make_req("b", [4, 5, 6])
    tap.on_request_arrival(a)
    tap.on_request_arrival(b)
    abort(a)
    tap.on_request_finish(a)
    tap.on_request_abort(b)
    batch = tap.read()
    assert batch.records == () and batch.in_flight == 0


def test_cache_salt_namespaces_the_chain_as_sglang_namespaces_the_tree():
    """Same tokens under two cache_salts share nothing (SGLang would not share them either);
    under one salt they share everything."""
    tap = RecordingTap(block_tokens=4)
    reqs = [make_req("x", [1, 2, 3, 4], cache_salt="t1"),
            make_req("y", [1, 2, 3, 4], cache_salt="t2"),
            make_req("z", [1, 2, 3, 4], cache_salt="t1"), make_req("w", [1, 2, 3, 4])]
    for req in reqs:
        tap.on_request_arrival(req)
        finish(req, 1)
        tap.on_request_finish(req)
    x, y, z, w = (r.blocks for r in tap.read().records)
    assert x == z and x != y and w not in (x, y)


def test_a_failing_hook_is_counted_never_raised_then_turns_itself_off():
    """A Req whose prompt cannot be read: no exception reaches the caller; after max_errors
    the tap is off and /records says why."""
    tap = RecordingTap(block_tokens=4, max_errors=3)
    broken = make_req("bad", [1, 2, 3])
    broken.origin_input_ids = object()  # not a sequence of ints
    for _ in range(2):
        tap.on_request_arrival(broken)
    assert tap.errors == 2 and tap.enabled
    assert records_response(tap, {})[1]["errors"] == 2
    tap.on_request_arrival(broken)
    status, body = records_response(tap, {})
    assert (tap.errors, tap.enabled, status) == (3, False, 404)
    assert body["error"] == ("recording turned itself off after 3 hook errors "
                             "(last: TypeError at arrival)")


def test_route_rejects_bad_queries_and_caps_the_page():
    """ack=-1 and limit=x are 400s; limit above 4096 is served as 4096; a stale recording id
    (a restarted server) makes the ack release nothing."""
    tap = RecordingTap(block_tokens=4)
    for i in range(3):
        req = make_req(f"r{i}", [i + 1] * 5)
        tap.on_request_arrival(req)
        finish(req, 1)
        tap.on_request_finish(req)
    assert records_response(tap, {"ack": "-1"}) == (400, {"error": "ack must be >= 0, got -1"})
    assert records_response(tap, {"limit": "x"}) == (400, {"error": "limit='x' is not an integer"})
    assert len(records_response(tap, {"limit": "99999"})[1]["records"]) == 3
    status, body = records_response(tap, {"ack": "2", "recording": "not-this-one"})
    assert [r["seq"] for r in body["records"]] == [1, 2, 3] and body["next_ack"] == 3
    status, body = records_response(tap, {"ack": "2", "recording": tap.recording_id, "limit": "1"})
    assert [r["seq"] for r in body["records"]] == [3]

"""RecordingSession against a real loopback endpoint: a server that goes away mid-recording,
and one that restarts (a new recording id, sequence numbers from 1 again)."""

from __future__ import annotations

import pytest
from record_support import finish, make_req
from records_http import RecordsEndpoint, sglang_info

from engine_adapter.recording.tap import RecordingTap
from kvctl.record.client import connect
from kvctl.record.session import RecordingSession

pytestmark = pytest.mark.integration


def feed(tap: RecordingTap, lengths: list[int]) -> None:
    for length in lengths:
        req = make_req(f"r{id(tap)}-{length}", [7] * length)
        tap.on_request_arrival(req)
        finish(req, 2)
        tap.on_request_finish(req)


def test_a_plugin_that_goes_away_stops_the_session_keeping_its_records(sglang_ready):
    """The endpoint closes after the first page: the session stops by itself once the grace
    period passes, says why, and keeps the two records it had."""
    tap = RecordingTap(block_tokens=512)
    feed(tap, [10, 20])
    endpoint = RecordsEndpoint(tap, info=lambda e: sglang_info(e.url))
    _target, client, first = connect(endpoint.url, plugin_url=None, token=None, block_tokens=512)
    endpoint.close()
    session = RecordingSession(client, first, duration_s=30, max_requests=None,
                               interval_s=0.05, grace_s=0.3)
    session.run()
    assert [r.input_length for r in session.records] == [10, 20]
    assert session.lost is not None and "stopped answering" in session.lost


def test_a_restarted_server_continues_the_recording_from_its_first_record(sglang_ready):
    """A new tap (new recording id) behind the same endpoint: its records from seq 1 are
    taken although the reader's ack was 2, and the restart is counted."""
    old, new = RecordingTap(block_tokens=512), RecordingTap(block_tokens=512)
    feed(old, [10, 20])
    feed(new, [30])
    with RecordsEndpoint(old, info=lambda e: sglang_info(e.url)) as endpoint:
        _target, client, first = connect(endpoint.url, plugin_url=None, token=None,
                                         block_tokens=512)
        endpoint.tap = new
        session = RecordingSession(client, first, duration_s=None, max_requests=3,
                                   interval_s=0.05)
        session.run()
    assert [r.input_length for r in session.records] == [10, 20, 30]
    assert session.restarts == 1 and session.dropped == 0

"""The drive sends requests due at the same instant in trace order (kvctl/twin/drive.py):
each waits until the one before it has its response headers, so a router receives, and
round robin deals, them in line order.

The server is a stdlib HTTP server on loopback that notes when each POST arrives, holds its
response headers for HOLD_S, then streams one SSE chunk in SGLang's shape (a real SGLang
server cannot hold its headers on demand; tests/e2e drives the real ones). Not timed: the
order and the spacing follow from the rule, not from this machine's speed.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from kvctl.replay.mooncake import MooncakeRecord
from kvctl.twin import drive as drive_module
from kvctl.twin.drive import RequestForm, drive
from kvctl.twin.prompts import BlockVocabulary
from support.http_stub import serving

pytestmark = pytest.mark.integration

HOLD_S = 0.05  # well below drive.ORDER_WAIT_S: the wait ends on the headers, not the bound
SAME_INSTANT = 12


class OrderServer:
    """Notes (rid, arrival time) per POST /generate; holds the headers `hold_s`."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.seen: list[tuple[str, float]] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.seen.append((body["rid"], time.monotonic()))
                time.sleep(hold_s)
                chunk = {"text": "", "meta_info": {"cached_tokens": 0, "completion_tokens": 1}}
                payload = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self._serving = serving(Handler)
        self.url = self._serving.__enter__()

    def close(self) -> None:
        self._serving.__exit__(None, None, None)


def _record(line: int, arrival_s: float) -> MooncakeRecord:
    return MooncakeRecord(line=line, arrival_s=arrival_s, input_length=8, output_length=1,
                          hash_ids=(line,), block_tokens=16)


@pytest.fixture
def server():
    server = OrderServer()
    yield server
    server.close()


def test_requests_due_together_arrive_in_line_order_each_after_the_one_before(server):
    """SAME_INSTANT lines at t = 0 (listed in reverse, so list order is not line order) and
    one at 1 s: the server sees lines 1..SAME_INSTANT in order, each at least HOLD_S after
    the one before (it waited for those headers), and the last line after 1 s."""
    records = [_record(line, 0.0) for line in range(SAME_INSTANT, 0, -1)]
    records.append(_record(SAME_INSTANT + 1, 1.0))
    started = time.monotonic()
    result = drive(server.url, records, BlockVocabulary(1000, 16),
                   form=RequestForm(rid_prefix="r"), metrics_urls=[server.url])
    assert [m.rejected for m in result.requests] == [None] * len(records)
    rids = [rid for rid, _ in server.seen]
    assert rids == [f"r{line}" for line in range(1, SAME_INSTANT + 2)]
    times = [t for _, t in server.seen]
    gaps = [b - a for a, b in zip(times[:SAME_INSTANT], times[1:SAME_INSTANT])]
    assert min(gaps) >= HOLD_S * 0.9, gaps
    assert times[-1] - started >= 1.0


def test_the_wait_is_bounded(monkeypatch):
    """A server that holds every answer's headers 0.4 s, the wait bounded at 0.01 s: the
    three requests due at t = 0 all arrive before any hold ends (none waited for another's
    headers past the bound)."""
    monkeypatch.setattr(drive_module, "ORDER_WAIT_S", 0.01)
    slow = OrderServer(hold_s=0.4)
    try:
        started = time.monotonic()
        drive(slow.url, [_record(line, 0.0) for line in range(1, 4)], BlockVocabulary(1000, 16),
              form=RequestForm(rid_prefix="r"), metrics_urls=[slow.url])
    finally:
        slow.close()
    times = [t - started for _, t in slow.seen]
    assert len(times) == 3
    assert max(times) < 0.4, times

"""`kvctl record` end to end over real HTTP on loopback.

The server side is a RecordingTap fed with SGLang's real `Req` objects (as the kvctl
plugin's scheduler hooks feed it) behind a stdlib HTTP server that serves the plugin's
/records route and SGLang's /server_info fields (records_http.py). A real SGLang server with
the plugin does run on this CPU (tests/e2e, docs/cpu-server.md; tests/e2e/test_e2e_plugin.py
records from one), but it takes minutes to start; this stand-in lets each case here set the
exact records, failures and timing it needs in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from record_support import finish, make_req
from records_http import RecordsEndpoint, sglang_info
from typer.testing import CliRunner

from engine_adapter.recording.tap import RecordingTap
from kvctl.cli.app import app
from kvctl.record.writer import meta_path
from support.signals import sigint_default

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def advertised(endpoint: RecordsEndpoint) -> dict:
    return sglang_info(endpoint.url)


def serve(tap: RecordingTap, **kwargs) -> RecordsEndpoint:
    kwargs.setdefault("info", advertised)
    return RecordsEndpoint(tap, **kwargs)


def feed(tap: RecordingTap, prompts: list[list[int]], *, outputs: int = 5) -> None:
    for index, tokens in enumerate(prompts):
        req = make_req(f"req-{id(tap)}-{index}", tokens)
        tap.on_request_arrival(req)
        finish(req, outputs)
        tap.on_request_finish(req)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_records_a_server_into_a_mooncake_trace_with_its_sidecar(tmp_path, sglang_ready):
    """Three requests (two share a 512-token prefix): the trace has their lengths and dense
    first-seen ids, the sidecar the server's model and page size, and the reader's ack
    released them on the server."""
    tap = RecordingTap(block_tokens=512)
    shared = list(range(1, 513))
    feed(tap, [shared + [600] * 88, shared + [700] * 10, list(range(2000, 2300))], outputs=7)
    out = tmp_path / "mine.jsonl"
    with serve(tap) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--out", str(out),
                                     "--max-requests", "3", "--json"])
    assert result.exit_code == 0, result.output
    assert [(r["input_length"], r["output_length"], r["hash_ids"]) for r in rows(out)] == [
        (600, 7, [0, 1]), (522, 7, [0, 2]), (300, 7, [3])]
    sidecar = json.loads(meta_path(out).read_text())
    assert (sidecar["model"], sidecar["page_size"], sidecar["block_tokens"]) == (
        "tiny-llama", 16, 512)
    assert (sidecar["dropped"], sidecar["requests"], sidecar["distinct_blocks"]) == (0, 3, 4)
    assert sidecar["token_ids_stored"] is False and sidecar["stopped_by"] == "max-requests"
    assert json.loads(result.stdout)["out"] == str(out)
    assert tap.read().records == ()  # acknowledged, released


def test_block_tokens_coarsens_the_servers_page_blocks_as_a_native_hash_would(tmp_path,
                                                                              sglang_ready):
    """A server hashing 4-token blocks, recorded with --block-tokens 8, gives the trace a
    server hashing 8-token blocks gives (ids [0, 1], [0, 2], [3] for two prompts sharing
    their first 8 tokens, then 2 more, and a third sharing nothing); the sidecar says 8,
    and that the server hashed 4."""
    prompts = [list(range(1, 11)) + [50] * 3, list(range(1, 11)) + [60] * 5, [70] * 9]
    traces = {}
    for server_blocks, wanted in ((4, ["--block-tokens", "8"]), (8, [])):
        tap = RecordingTap(block_tokens=server_blocks)
        feed(tap, prompts)
        out = tmp_path / f"server{server_blocks}.jsonl"
        with serve(tap) as endpoint:
            result = runner.invoke(app, ["record", "--url", endpoint.url, "--out", str(out),
                                         "--max-requests", "3", *wanted])
        assert result.exit_code == 0, result.output
        traces[server_blocks] = [(r["input_length"], r["hash_ids"]) for r in rows(out)]
    assert traces[4] == traces[8] == [(13, [0, 1]), (15, [0, 2]), (9, [3, 4])]
    sidecar = json.loads(meta_path(tmp_path / "server4.jsonl").read_text())
    assert (sidecar["block_tokens"], sidecar["server_block_tokens"]) == (8, 4)


class TrafficOnTheClock:
    """The recording's clock and sleep (`RecordingSession(clock=, sleep=)`): each sleep moves
    the clock by its length in tenths of a second (exact), and feeds the requests due by
    then, so traffic arrives between polls on a schedule no machine load can shift."""

    def __init__(self, tap: RecordingTap, due: dict[int, list[int]]) -> None:
        self.tap, self.due, self.tenths = tap, dict(due), 0

    def clock(self) -> float:
        return self.tenths / 10

    def sleep(self, seconds: float) -> None:
        self.tenths += round(seconds * 10)
        for tick in sorted(t for t in self.due if t <= self.tenths):
            feed(self.tap, [self.due.pop(tick)])


def test_records_for_a_duration_while_traffic_arrives(tmp_path, sglang_ready, monkeypatch):
    """--duration 1.5s, --interval 0.1, six requests finishing 0.2 s apart from 0.5 s (the
    last at 1.5 s, as the deadline passes): it stops by itself with all six, the last drained after
    the deadline, and the sidecar says 1.5 s were recorded."""
    import functools

    import kvctl.record.session as session_module

    tap = RecordingTap(block_tokens=512)
    traffic = TrafficOnTheClock(tap, {
        3 + 2 * i: list(range(10 * i + 1, 10 * i + 40)) for i in range(1, 7)})
    monkeypatch.setattr(session_module, "RecordingSession", functools.partial(
        session_module.RecordingSession, clock=traffic.clock, sleep=traffic.sleep))
    out = tmp_path / "live.jsonl"
    with serve(tap) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--out", str(out),
                                     "--duration", "1.5s", "--interval", "0.1"])
    assert result.exit_code == 0, result.output
    assert traffic.due == {} and traffic.tenths == 15
    assert [r["input_length"] for r in rows(out)] == [39] * 6
    assert "recorded 6 requests" in result.stdout
    sidecar = json.loads(meta_path(out).read_text())
    assert (sidecar["stopped_by"], sidecar["recorded_seconds"]) == ("duration", 1.5)


def test_ctrl_c_writes_what_was_recorded(tmp_path, sglang_ready):
    """SIGINT to a running `kvctl record` (a real process): exit 0, every record it had
    acknowledged is in the file, nothing half-written."""
    tap = RecordingTap(block_tokens=512)
    feed(tap, [[5] * 700, [5] * 800, [6] * 100])
    out = tmp_path / "ctrlc.jsonl"
    with serve(tap) as endpoint:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvctl", "record", "--url", endpoint.url, "--out", str(out),
             "--interval", "0.1"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)}, text=True, preexec_fn=sigint_default)
        deadline = time.monotonic() + 60
        while tap.read().records and time.monotonic() < deadline:  # until it has acked them
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert [r["input_length"] for r in rows(out)] == [700, 800, 100]
    assert rows(out)[0]["hash_ids"] == [0, 1] and rows(out)[1]["hash_ids"] == [0, 2]
    assert json.loads(meta_path(out).read_text())["stopped_by"] == "ctrl-c"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctrlc.jsonl", "ctrlc.meta.json"]


def test_marker_prompt_token_ids_reach_neither_file_nor_wire(tmp_path, sglang_ready):
    """Hygiene: a prompt of distinctive token ids; none of them appears, as a number, in the
    /records bodies sent, the trace or the sidecar."""
    marker = [918_273_645 + 7 * i for i in range(1030)]
    tap = RecordingTap(block_tokens=512)
    feed(tap, [marker])
    out = tmp_path / "hygiene.jsonl"
    with serve(tap) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--out", str(out),
                                     "--max-requests", "1"])
        bodies = b"".join(endpoint.bodies).decode()
    assert result.exit_code == 0, result.output
    texts = {"wire": bodies, "trace": out.read_text(), "sidecar": meta_path(out).read_text()}
    assert '"input_length": 1030' in bodies  # the record did travel
    for where, text in texts.items():
        leaked = [t for t in marker if str(t) in text]
        assert leaked == [], f"{where} carries token ids {leaked[:3]}"


def test_plugin_url_given_explicitly_when_the_server_advertises_none(tmp_path, sglang_ready):
    """No `kvctl_plugin` in /server_info: --plugin-url (and its --plugin-token) work."""
    tap = RecordingTap(block_tokens=512)
    feed(tap, [[3] * 40])
    out = tmp_path / "explicit.jsonl"
    with RecordsEndpoint(tap, token="s3cret", info=sglang_info(None)) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--plugin-url", endpoint.url,
                                     "--plugin-token", "s3cret", "--out", str(out),
                                     "--max-requests", "1"])
    assert result.exit_code == 0, result.output
    assert rows(out) == [{"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [0]}]


@pytest.mark.parametrize("case, expected", [
    ("no-plugin", "advertises no kvctl plugin in /server_info: start the server with "
                  "KVCTL_SGLANG_PLUGIN=1 KVCTL_RECORD=1, or pass --plugin-url"),
    ("recording-off", "recording is off: start the server with KVCTL_RECORD=1"),
    ("wrong-token", "refused the token (HTTP 401): pass --plugin-token"),
    ("block-size", "the server records 256-token blocks; --block-tokens 100 is not a multiple "
                   "of 256: pass a multiple, or restart the server with "
                   "KVCTL_RECORD_BLOCK_TOKENS=100"),
    ("not-sglang", "does not look like an SGLang server"),
])
def test_a_server_that_cannot_be_recorded_is_one_line_naming_the_fix(tmp_path, case, expected):
    """Each case: exit 2, one line on stderr with the fix, no file."""
    tap = RecordingTap(block_tokens=256 if case == "block-size" else 512,
                       enabled=case != "recording-off")
    info = {"no-plugin": sglang_info(None), "not-sglang": None}.get(case, advertised)
    token = "right" if case == "wrong-token" else None
    out = tmp_path / "t.jsonl"
    blocks = ["--block-tokens", "100"] if case == "block-size" else []
    with RecordsEndpoint(tap, token=token, info=info) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--out", str(out),
                                     "--plugin-token", "wrong", *blocks])
    assert result.exit_code == 2
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_plugin_without_the_records_route_says_it_predates_recording(tmp_path):
    """The plugin answers 404 {"error": "no route /records"} (an older kvctl): exit 2
    naming the upgrade, not the plugin's own routing message."""
    with RecordsEndpoint(RecordingTap(), info=advertised) as endpoint:
        original = endpoint._answer

        def older_plugin(handler):
            if handler.path.startswith("/records"):
                from records_http import _send

                return _send(handler, 404, b'{"error": "no route /records; try /healthz"}')
            return original(handler)

        endpoint._answer = older_plugin
        result = runner.invoke(app, ["record", "--url", endpoint.url,
                                     "--out", str(tmp_path / "t.jsonl")])
    assert result.exit_code == 2 and "predates recording" in result.stderr


def test_unreachable_urls_exit_2_naming_the_fix(tmp_path):
    """A dead --url, and a live server advertising a dead plugin address."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = runner.invoke(app, ["record", "--url", dead, "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 2 and "cannot reach the SGLang server" in result.stderr
    assert "check --url" in result.stderr
    with RecordsEndpoint(RecordingTap(), info=sglang_info(dead)) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url,
                                     "--out", str(tmp_path / "a.jsonl")])
    assert result.exit_code == 2 and "cannot reach the kvctl plugin" in result.stderr
    assert "KVCTL_SGLANG_PLUGIN=1" in result.stderr


UNWRITABLE_FOR_ROOT_TOO = "/proc/kvctl-record-test.jsonl"  # procfs takes no new files


def test_an_unwritable_destination_fails_before_recording():
    """--out in a folder nobody can create a file in, root included (/proc): exit 2 with one
    line naming the path, and the server was never asked anything. (A user without root
    is stopped by the permission check, root by the probe file the check then creates.)"""
    import re

    with serve(RecordingTap()) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--max-requests", "1",
                                     "--duration", "2s", "--out", UNWRITABLE_FOR_ROOT_TOO])
        asked = list(endpoint.requests)
    assert result.exit_code == 2, result.output
    assert re.fullmatch(
        r"kvctl: error: --out /proc/kvctl-record-test\.jsonl: "
        r"(folder /proc is not writable|cannot write in /proc \(.+\))\n", result.stderr)
    assert asked == []
    assert not os.path.exists(UNWRITABLE_FOR_ROOT_TOO)


def test_an_out_path_under_a_file_fails_before_recording(tmp_path):
    """--out below a regular file (no such folder): exit 2, the server never asked."""
    (tmp_path / "plain").write_text("x")
    with serve(RecordingTap()) as endpoint:
        result = runner.invoke(app, ["record", "--url", endpoint.url, "--max-requests", "1",
                                     "--out", str(tmp_path / "plain" / "t.jsonl")])
        asked = list(endpoint.requests)
    assert result.exit_code == 2 and "plain is not a folder" in result.stderr and asked == []


def test_a_full_disk_at_the_end_removes_the_partial_files(tmp_path, sglang_ready, monkeypatch):
    """ENOSPC while writing: exit 1 naming it, and no trace, sidecar or temporary left."""
    tap = RecordingTap(block_tokens=512)
    feed(tap, [[4] * 30])

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    with serve(tap) as endpoint:
        monkeypatch.setattr(os, "fsync", full_disk)
        result = runner.invoke(app, ["record", "--url", endpoint.url,
                                     "--out", str(tmp_path / "t.jsonl"), "--max-requests", "1"])
    assert result.exit_code == 1 and "No space left on device" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0s", "ten minutes", "-5m"])
def test_a_bad_duration_is_an_input_error(tmp_path, value):
    """Exit 2 naming the value, before anything is contacted."""
    result = runner.invoke(app, ["record", "--url", "http://127.0.0.1:9", "--out",
                                 str(tmp_path / "t.jsonl"), "--duration", value])
    assert result.exit_code == 2 and f"--duration {value!r}" in result.stderr

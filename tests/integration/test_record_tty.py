"""`kvctl record` in a real terminal (a pseudo-terminal): the live Rich line shows the counts
while it records; it is absent under --json. And recording imports neither torch nor SGLang."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from record_support import finish, make_req
from records_http import RecordsEndpoint, sglang_info

from engine_adapter.recording.tap import RecordingTap

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def run_in_pty(args: list[str], timeout_s: float = 90.0) -> tuple[int, str]:
    """Run `python -m kvctl ARGS` with a pty as stdin/stdout/stderr; (exit code, screen text)."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "kvctl", *args], cwd=REPO, env=env,
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def test_live_line_counts_requests_tokens_blocks_and_drops(tmp_path, sglang_ready):
    """Two requests (1,000 and 600 prompt tokens sharing their first block) recorded for
    2 s: the live line reads '2 requests  1,600 tokens  3 blocks  0 dropped'."""
    tap = RecordingTap(block_tokens=512)
    for index, length in enumerate((1000, 600)):
        req = make_req(f"tty-{index}", list(range(1, length + 1)))
        tap.on_request_arrival(req)
        finish(req, 4)
        tap.on_request_finish(req)
    with RecordsEndpoint(tap, info=lambda e: sglang_info(e.url)) as endpoint:
        code, screen = run_in_pty(["record", "--url", endpoint.url, "--out",
                                   str(tmp_path / "t.jsonl"), "--duration", "2s",
                                   "--interval", "0.2"])
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)
    assert code == 0, plain
    assert "recording" in plain
    assert "2 requests  1,600 tokens  3 blocks  0 dropped  0 in flight" in plain
    assert "recorded 2 requests, 1,600 prompt tokens, 3 distinct blocks, 0 dropped" in plain


def test_recording_imports_neither_torch_nor_sglang(tmp_path):
    """`kvctl record` against a dead server (it gets as far as connecting) stays light."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvctl", "record", "--url",
                           dead, "--out", str(tmp_path / "t.jsonl")], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    modules = {line.rsplit("|", 1)[1].strip().split(".")[0]
               for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert proc.returncode == 2 and "kvctl" in modules and "engine_adapter" in modules
    assert not {"torch", "sglang"} & modules

"""`kvctl sandbox` end to end: SGLang's real server on this CPU, started by the command a user
runs, with kvctl's plugin answering inside it.

    --json --port 0   one JSON line once ready (url, plugin_url, kv_events), the server and
                      the plugin answer at those addresses, SIGINT stops everything (exit 0,
                      no process and no temp directory left)
    --port P in use   one line on stderr naming the port, exit 2, nothing started

Each start costs a minute or two on the shared 2-core machine (SGLang's imports).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from e2e.sandbox_proc import kill_group, read_line
from e2e.sglang_server import ROOT, skip_reason
from support.signals import sigint_default

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _get(url: str) -> tuple[int, dict]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.status, json.loads(reply.read())






@pytest.fixture
def need_server():
    if reason := skip_reason():
        pytest.skip(reason)


def test_sandbox_json_port_0_serves_then_stops_cleanly_on_sigint(need_server):
    """One JSON line once ready; /server_info answers and names the plugin; the plugin's
    /healthz is ok and /snapshot holds a ledger of the sandbox's pool; SIGINT ends kvctl
    with exit 0, nothing more on stdout, the server's process gone, its temp dir removed."""
    proc = subprocess.Popen([sys.executable, "-m", "kvctl", "sandbox", "--json", "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    doc: dict = {}
    try:
        line = read_line(proc.stdout, 480)
        assert line, f"no ready line; stderr: {proc.stderr.read() if proc.poll() else ''}"
        doc = json.loads(line)
        assert doc["url"].startswith("http://127.0.0.1:") and doc["kv_events"].startswith("tcp://")
        status, info = _get(f"{doc['url']}/server_info")
        assert status == 200 and info["kvctl_plugin"]["url"] == doc["plugin_url"]
        status, health = _get(f"{doc['plugin_url']}/healthz")
        assert (status, health["status"]) == (200, "ok")
        status, snap = _get(f"{doc['plugin_url']}/snapshot")
        assert status == 200 and snap["snapshot"]["ledger"]["pool_tokens"] == 4096
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
            kill_group(doc.get("pid"))  # kvctl, killed, could not stop its server
    assert proc.returncode == 0, err
    assert out == ""  # the ready line was the only one
    server_pid = doc["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)
    assert not Path(doc["log"]).parent.exists()


def test_sandbox_port_in_use_is_one_line_exit_2(need_server):
    """A --port that something already listens on: one line naming the port, exit 2, in
    seconds (nothing is started)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "kvctl", "sandbox", "--port", str(port)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: --port: port ")
    assert f"port {port} on 127.0.0.1 is in use" in lines[0]
    assert done.stdout == "" and time.monotonic() - began < 60

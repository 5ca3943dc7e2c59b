"""`kvctl monitor --url` in a real terminal (a detached tmux session) attached to a real
`sglang.launch_server`: the header names the server, the pool panel shows its size, the
tree panel shows the KV-event mirror of shared-prefix requests (40 tokens, 3 leaves: see
test_e2e_inspect's docstring), and `q` exits with 0."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid

import pytest

from e2e.kvctl_cli import shared_prefix_prompts
from e2e.prometheus_proc import wait_for
from e2e.sglang_server import PAGE, ROOT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.tui,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]

SOCKET = f"kvctl-e2e-{uuid.uuid4().hex[:8]}"  # a private tmux server


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCKET, *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def terminal(server, tmp_path):
    name, exit_file = "monitor", tmp_path / "exit-code"
    # pytest's environment carries COLUMNS/LINES, which Textual would obey over the pane;
    # 240 columns keep each panel line unwrapped
    command = (f"cd {ROOT} && unset COLUMNS LINES && {sys.executable} -m kvctl monitor "
               f"--url {server.url} --refresh 0.5; echo $? > {exit_file}")
    tmux("new-session", "-d", "-s", name, "-x", "240", "-y", "50", command)
    yield name, exit_file
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)


def test_monitor_shows_the_live_server_and_quits_with_q(server, terminal):
    """Header, pool size and the mirror's cached tokens and leaves appear; q exits 0."""
    name, exit_file = terminal
    screen = lambda: tmux("capture-pane", "-p", "-t", name)  # noqa: E731
    # The run state turns "● live, read-only" as soon as the source is adopted, before the
    # polling worker's first remote read is on screen; the engine part of the status line
    # (" · SGLang <version>") comes with that first snapshot, so wait for both.
    first = wait_for(lambda: "● live" in (s := screen()) and " · SGLang " in s and s, 120,
                     "the live dashboard with its first snapshot")
    assert f"{server.url} (remote, read-only)" in first and "SGLang 0.5.23" in first
    assert "pool             1,024" in first and f"page {PAGE}" in first

    for ids in shared_prefix_prompts(4 * PAGE, 2 * PAGE, 3):
        server.generate(ids)
    wait_for(lambda: "KV-event mirror: 40 cached tokens, 3 leaves" in screen(), 60,
             "the mirror of three shared-prefix requests")
    tmux("send-keys", "-t", name, "q")
    wait_for(exit_file.exists, 30, "the monitor to exit")
    assert exit_file.read_text().strip() == "0"

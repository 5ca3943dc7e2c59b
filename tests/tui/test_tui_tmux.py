"""`kvctl monitor` as a person uses it: in a real terminal (a detached tmux session), with
no arguments, so it runs the shipped coding-agents scenario live on the embedded engine.

Start it, wait for the dashboard, read the screen with `capture-pane`, check the panel
titles and that the numbers move, press `q`, and check the process exited with 0.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.tui,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
KVCTL = ROOT / ".venv" / "bin" / "kvctl"
TITLES = ("Pool", "Prefix reuse", "Integrity", "Radix tree", "Requests")
STEP = re.compile(r"step ([\d,]+)")
U_KV = re.compile(r"U_KV (\d\.\d{3})")


SOCKET = f"kvctl-tui-{uuid.uuid4().hex[:8]}"  # a private tmux server: no shared options


def tmux(*args: str) -> str:
    command = ["tmux", "-L", SOCKET, *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def wait_for(session: str, predicate, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if predicate(screen):
            return screen
        time.sleep(0.5)
    pytest.fail(f"timed out; the screen was:\n{screen}")


@pytest.fixture
def session(tmp_path):
    name = f"kvctl-monitor-{uuid.uuid4().hex[:8]}"
    exit_file = tmp_path / "exit-code"
    # pytest's environment carries COLUMNS=80/LINES=24, which Textual would obey over the pane
    command = (
        f"cd {ROOT} && unset COLUMNS LINES && {KVCTL} monitor --refresh 0.3; "
        f"echo $? > {exit_file}"
    )
    tmux("new-session", "-d", "-s", name, "-x", "160", "-y", "50", command)
    yield name, exit_file
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)


def step_of(screen: str) -> int:
    return int(STEP.search(screen)[1].replace(",", ""))


def test_monitor_in_tmux_runs_live_and_quits_with_q(session):
    """The dashboard appears with every panel title and live numbers; q exits with 0."""
    name, exit_file = session
    first = wait_for(name, lambda s: STEP.search(s) and "per-node read at step" in s, 180)
    for title in TITLES:
        assert f"─ {title} ─" in first, title
    assert U_KV.search(first) and "token_usage" in first and "H_prefix" in first
    assert "coding-agents.yaml (scenario, seed 7)" in first
    later = wait_for(name, lambda s: STEP.search(s) and step_of(s) > step_of(first), 30)
    assert "● live" in later
    tmux("send-keys", "-t", name, "q")
    deadline = time.monotonic() + 30
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert exit_file.read_text().strip() == "0"

"""TEST-ONLY helpers for tests that run `kvctl sandbox` as a child process: read its ready
line with a bound, and kill a process group it could not stop. Not a test module."""

from __future__ import annotations

import os
import signal
import threading


def read_line(stream, timeout_s: float) -> str:
    """The first line of `stream`, or "" after `timeout_s` (the sandbox never came up)."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return got[0] if got else ""


def kill_group(pid: int | None) -> None:
    """SIGKILL a process group (a sandbox server or router runs in its own session)."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

"""The sandbox launcher's failure path with a real child process: a server that exits during
start-up is one line naming the exit code, the log's last lines and where the log is."""

from __future__ import annotations

import sys

import pytest

from kvctl.sandbox.config import SandboxConfig
from kvctl.sandbox.launcher import SandboxFailed, SandboxServer

pytestmark = pytest.mark.integration


class _ExitsAtOnce(SandboxServer):
    """A real process in place of sglang.launch_server that logs two lines and exits 3."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", "print('loading'); print('x' * 900); "
                "print('OSError: [Errno 98] address already in use'); raise SystemExit(3)"]


def test_failed_start_is_one_line_with_the_log_tail(tmp_path):
    """exit 3 -> SandboxFailed: one line, 'exited 3', the last log line, long lines cut."""
    server = _ExitsAtOnce(SandboxConfig(port=0, plugin_port=0, plugin=False), tmp_path)
    with pytest.raises(SandboxFailed) as failure:
        server.start(timeout_s=60)
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(f"sglang.launch_server exited 3; log {tmp_path}/server-1.log: ")
    assert message.endswith("| OSError: [Errno 98] address already in use")
    assert "x" * 200 + "..." in message and "x" * 201 not in message

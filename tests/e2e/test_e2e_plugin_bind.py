"""kvctl's plugin endpoint is safe by default, on SGLang's real server on this CPU (issue 26,
item 4): a bind other hosts can reach, without KVCTL_PLUGIN_TOKEN, is refused with one log
line naming the fix (the server itself runs on); KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1 serves
it and logs a warning at the start."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from e2e.sglang_server import SGLangServer, free_port, skip_reason

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _server(tmp_path_factory, name: str, **env: str) -> tuple[SGLangServer, int]:
    if reason := skip_reason():
        pytest.skip(reason)
    port = free_port()
    server = SGLangServer(tmp_path_factory.mktemp(name), extra_env={
        "KVCTL_SGLANG_PLUGIN": "1", "KVCTL_PLUGIN_HOST": "0.0.0.0",
        "KVCTL_PLUGIN_PORT": str(port), **env})
    return server, port


def _log_lines(server: SGLangServer, needle: str) -> list[str]:
    return [line for line in server.log_path.read_text(errors="replace").splitlines()
            if needle in line]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_public_bind_without_token_is_refused_in_one_log_line(tmp_path_factory):
    """KVCTL_PLUGIN_HOST=0.0.0.0, no token: one error line naming KVCTL_PLUGIN_TOKEN and the
    opt-out, nothing listens on the plugin port, and SGLang still answers /generate."""
    server, port = _server(tmp_path_factory, "bind-refused")
    try:
        server.start()
        refused = _log_lines(server, "kvctl plugin: not serving on")
        assert len(refused) == 1, server.log_tail()
        assert f"not serving on 0.0.0.0:{port}: a non-loopback bind needs KVCTL_PLUGIN_TOKEN" \
            in refused[0] and "KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1" in refused[0]
        assert not _listening(port)
        assert server.generate([5, 6, 7, 8], max_new_tokens=2)["meta_info"]["completion_tokens"] == 2
    finally:
        server.stop()


def test_opt_out_serves_and_warns_at_start(tmp_path_factory):
    """KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1: the endpoint answers /healthz without a token and
    the log carries one warning naming the exposure."""
    server, port = _server(tmp_path_factory, "bind-opt-out",
                           KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED="1")
    try:
        server.start()
        warned = _log_lines(server, "WITHOUT authentication")
        assert len(warned) == 1 and "on 0.0.0.0" in warned[0], server.log_tail()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            assert (reply.status, json.loads(reply.read())["dp_rank"]) == (200, 0)
    finally:
        server.stop()

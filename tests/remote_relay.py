"""Test support for remote attaches (imported by name: pytest puts tests/ on sys.path for
the root conftest): SGLang's loopback stand-in in a process of its own, an HTTP relay to it
that a test can stop and start (a server that dies mid-run and comes back), and a URL where
nothing listens.

The stand-in is `python -m support.loopback_demo`: SGLang 0.5.23's own cache,
metrics collectors and KV-event publisher (tests/support/loopback.py). The relay is
a real stdlib HTTP server on loopback (LoopbackHttp) whose `/metrics` and `/server_info`
bodies are the stand-in's, fetched on every request.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine_adapter.remote.http_fetch import http_get
from support.loopback_http import LoopbackHttp

ROOT = Path(__file__).resolve().parents[1]


def dead_url() -> str:
    """http://127.0.0.1:PORT where nothing listens (a port bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class DemoProcess:
    """The loopback SGLang stand-in as a child process; `url` once it serves."""

    def __init__(self, *args: str, startup_s: float = 180.0) -> None:
        self._args, self._startup_s = args, startup_s
        self.url = ""

    def __enter__(self) -> DemoProcess:
        ready = Path(tempfile.mkdtemp(prefix="kvctl-demo-")) / "url"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "support.loopback_demo",
             "--ready-file", str(ready), *self._args],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"},
        )  # fmt: skip
        deadline = time.monotonic() + self._startup_s
        while not ready.exists() or not ready.read_text():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"loopback demo did not start: {self._process.stderr.read()}")
            time.sleep(0.2)
        self.url = ready.read_text().strip()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)


class Relay:
    """A loopback HTTP server answering with `upstream`'s /metrics and /server_info.

    `metrics_body` replaces the /metrics answer (e.g. a page that is not Prometheus text);
    `info_extra` adds keys to /server_info (e.g. a `kvctl_plugin` announcement).
    `stop()` takes the port down (a server that dies), `start()` brings it back.
    """

    def __init__(self, upstream: str, *, metrics_body: bytes | None = None,
                 info_extra: dict | None = None) -> None:
        self._upstream = upstream
        self._metrics_body = metrics_body
        self._info_extra = info_extra or {}
        self._http = LoopbackHttp(metrics=self._metrics, info=self._info)

    @property
    def url(self) -> str:
        return self._http.url

    def _metrics(self) -> tuple[bytes, str]:
        if self._metrics_body is not None:
            return self._metrics_body, "text/html; charset=utf-8"
        status, body = http_get(f"{self._upstream}/metrics", timeout_s=5)
        assert status == 200, status
        return body, "text/plain; version=0.0.4; charset=utf-8"

    def _info(self) -> dict:
        status, body = http_get(f"{self._upstream}/server_info", timeout_s=5)
        assert status == 200, status
        return {**json.loads(body), **self._info_extra}

    def stop(self) -> None:
        self._http.stop()

    def start(self) -> None:
        self._http.start()

    def close(self) -> None:
        self._http.close()

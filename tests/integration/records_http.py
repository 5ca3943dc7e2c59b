"""Test support: a stdlib HTTP server standing in for the kvctl plugin's endpoint and for
SGLang's /server_info, so `kvctl record` can be tested over real HTTP on loopback.

Routes: GET /records -> engine_adapter.recording.route.records_response(tap, query), with the
plugin's optional bearer token (401 without it); GET /server_info -> `info` when given
(a 404 otherwise, like a server that is not SGLang). Not a test module; imported by name.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine_adapter.recording.route import records_response


class RecordsEndpoint:
    """Serves `tap` on 127.0.0.1 (a free port); `info` may be a dict or a callable(self)."""

    def __init__(self, tap: Any, *, token: str | None = None, info: Any = None) -> None:
        self.tap, self.token, self.info = tap, token, info
        self.requests: list[str] = []  # paths asked, in order
        self.bodies: list[bytes] = []  # every /records body sent
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner._answer(self)

            def log_message(self, *args) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> RecordsEndpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        self.requests.append(parsed.path)
        if parsed.path == "/server_info" and self.info is not None:
            info = self.info(self) if callable(self.info) else self.info
            return _send(handler, 200, json.dumps(info).encode())
        if parsed.path == "/records":
            if self.token and handler.headers.get("Authorization") != f"Bearer {self.token}":
                return _send(handler, 401, b'{"error": "missing or wrong bearer token"}')
            query = dict(urllib.parse.parse_qsl(parsed.query))
            status, document = records_response(self.tap, query)
            body = json.dumps(document).encode()
            self.bodies.append(body)
            return _send(handler, status, body)
        _send(handler, 404, b"not found", content_type="text/plain")


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes,
          content_type: str = "application/json") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def sglang_info(plugin_url: str | None, *, page_size: int = 16, model: str = "tiny-llama") -> dict:
    """The /server_info fields `kvctl record` reads, as SGLang names them, plus the plugin's
    `kvctl_plugin` advertisement when `plugin_url` is given."""
    info: dict = {"page_size": page_size, "served_model_name": model, "model_path": model,
                  "version": "0.5.23", "dp_size": 1, "max_total_num_tokens": 65_536}
    if plugin_url is not None:
        info["kvctl_plugin"] = {"url": plugin_url}
    return info

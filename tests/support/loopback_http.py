"""A tiny HTTP server for the loopback SGLang stand-in: `/metrics` and `/server_info`.

Serves whatever the owner's callables return, on 127.0.0.1. `stop()` and `start()` take
the port down and bring it back on the same number, which is how tests simulate a server
that goes away and returns. Stdlib only.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class LoopbackHttp:
    """Routes: GET /metrics -> metrics(); GET /server_info, /get_server_info -> info().

    `metrics` returns (body, content_type), or is None for a server started without
    --enable-metrics (404, like SGLang); `info` returns a JSON-able dict. Raising inside
    either answers HTTP 500. Owns one server thread; `close()` is idempotent.
    """

    def __init__(
        self,
        *,
        metrics: Callable[[], tuple[bytes, str]] | None,
        info: Callable[[], dict[str, Any]],
        port: int = 0,
        info_paths: tuple[str, ...] = ("/server_info", "/get_server_info"),
    ) -> None:
        self._metrics, self._info, self._info_paths = metrics, info, info_paths
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        if self._server is not None:
            return
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner._answer(self)

            def log_message(self, *args) -> None:  # keep test output quiet
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kvctl-loopback-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
        self._server = self._thread = None

    close = stop

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?", 1)[0]
        try:
            if path == "/metrics" and self._metrics is not None:
                body, content_type = self._metrics()
            elif path in self._info_paths:
                body = json.dumps(self._info(), default=str).encode("utf-8")
                content_type = "application/json"
            else:
                body, content_type, status = b"not found", "text/plain", 404
                return _send(handler, status, body, content_type)
        except Exception as err:  # a broken stand-in answers like a broken server
            return _send(handler, 500, str(err).encode("utf-8"), "text/plain")
        _send(handler, 200, body, content_type)


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)

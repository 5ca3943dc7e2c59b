"""Test support (imported by name, like remote_relay): a loopback HTTP server that speaks the
kvctl plugin's wire contract, serving a snapshot the test built.

The plugin itself (engine_adapter/plugin/server.py) runs inside an SGLang scheduler; that
runs on this CPU too (tests/e2e/test_e2e_plugin.py), but takes minutes to start and serves
whatever its scheduling produced. This endpoint serves the same routes and bodies from a
`Snapshot` the test chose (a test passes
`encode_snapshot(EmbeddedEngine.snapshot())`), so kvctl's client side is tested over real HTTP::

    GET /healthz   200 {"schema_version", "kvctl_version", "status", "failures",
                        "disabled_reason", "dp_rank", "steps"}
    GET /snapshot  200 {"schema_version", "kvctl_version", "snapshot": doc}
                   503 {"error"} while starting or disabled;  401 {"error"} on a bad token

`status` ("ok" | "starting" | "disabled") and `schema_version` are attributes a test may
change between reads; `requests` counts what was asked, per path. `live_request_snapshot()`
builds the reference snapshot the tests serve.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from engine_adapter.snapshot_codec import SCHEMA_VERSION


class PluginEndpoint:
    def __init__(self, snapshot_doc: dict, *, token: str | None = None, steps: int = 0) -> None:
        self.snapshot_doc = snapshot_doc
        self.token = token
        self.steps = steps
        self.status = "ok"
        self.schema_version = SCHEMA_VERSION
        self.requests: Counter[str] = Counter()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body = owner._route(self.path, self.headers.get("Authorization"))
                payload = json.dumps(body, allow_nan=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _envelope(self) -> dict:
        return {"schema_version": self.schema_version, "kvctl_version": "test"}

    def _route(self, path: str, authorization: str | None) -> tuple[int, dict]:
        path = path.split("?", 1)[0]
        self.requests[path] += 1
        if self.token is not None and authorization != f"Bearer {self.token}":
            return 401, {"error": "missing or wrong bearer token (KVCTL_PLUGIN_TOKEN)"}
        if path == "/healthz":
            reason = "disabled after 5 failures; last: ValueError: boom"
            return 200, {**self._envelope(), "status": self.status, "failures": 0,
                         "disabled_reason": reason if self.status == "disabled" else None,
                         "dp_rank": 0, "steps": self.steps}
        if path == "/snapshot":
            if self.status != "ok":
                return 503, {"error": f"plugin {self.status}"}
            return 200, {**self._envelope(), "snapshot": self.snapshot_doc}
        return 404, {"error": f"no route {path}"}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def live_request_snapshot():
    """A REAL embedded-engine snapshot (SGLang's tree and allocator on CPU, per-node refs):
    one finished request left 192 tokens (12 pages of 16) cached, and one live request with
    the same 200-token prompt matched and locked them (protected 192, one lease)."""
    import numpy as np

    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    engine = EmbeddedEngine(EngineConfig(pool_tokens=2048, page_size=16, token_budget=1024,
                                         max_running_requests=16, max_context_len=2048))
    try:
        engine.submit(RequestSpec(rid="warm", tokens=np.arange(1, 201), max_new_tokens=4))
        engine.run_until_idle()
        engine.submit(RequestSpec(rid="holder", tokens=np.arange(1, 201), max_new_tokens=30,
                                  arrival_s=engine.clock_s))
        engine.step()
        engine.check_integrity()
        return engine.snapshot(per_node_refs=True)
    finally:
        engine.close()

"""The plugin's HTTP endpoint: the stdlib `ThreadingHTTPServer` on a daemon thread.

    GET /healthz   200 {"schema_version", "kvctl_version", "status": "ok"|"starting"|"disabled",
                        "failures", "disabled_reason", "dp_rank", "steps"}
    GET /snapshot  200 {"schema_version", "kvctl_version", "snapshot": encode_snapshot(latest)}
                   503 {"error": ...} before the first sample, and once the plugin disabled itself
    GET /receipts?after=N  200 {"schema_version", "kvctl_version", "first", "next",
                        "receipts": [encode_receipt(r), ...]}  (receipt_log.py: numbering)
    GET /step_samples?since=N  timed scheduler steps and their shapes (step_route.py), for
                   kvctl calibrate and kvctl record
    GET /records?ack=N&limit=M  kvctl record's stream (recording/route.py); 404 unless the
                   server runs with KVCTL_RECORD=1; salted block hashes and lengths only
    anything else  404 {"error": ...};  a missing or wrong bearer token: 401 {"error": ...}

The handler threads read only `runtime.latest` (an immutable Snapshot) and `runtime.health()`;
they never touch SGLang's objects, so serving cannot race the scheduler. A snapshot is
encoded once (by its `seq`) however many clients read it. Bodies carry what `Snapshot` holds:
counts, hashed namespace labels and opaque request ids, never token ids or prompt text.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from engine_adapter.snapshot_codec import SCHEMA_VERSION, encode_receipt, encode_snapshot

logger = logging.getLogger("kvctl.plugin")


def _kvctl_version() -> str:
    from engine_adapter.base.version import __version__

    return __version__


class PluginServer:
    """Serves one runtime on (host, port); port 0 picks a free one (tests)."""

    def __init__(self, runtime: Any, host: str, port: int) -> None:
        self.runtime = runtime
        self.token = runtime.settings.token
        self.version = _kvctl_version()
        self._cache: tuple[int, bytes] | None = None
        self._cache_lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="kvctl-plugin-http",
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def envelope(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "kvctl_version": self.version}

    def snapshot_body(self) -> bytes | None:
        snap = self.runtime.latest
        if snap is None:
            return None
        with self._cache_lock:
            if self._cache is None or self._cache[0] != snap.seq:
                doc = {**self.envelope(), "snapshot": encode_snapshot(snap)}
                self._cache = (snap.seq, json.dumps(doc, allow_nan=False).encode())
            return self._cache[1]

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        expected = f"Bearer {self.token}".encode()
        return header is not None and hmac.compare_digest(header.encode(), expected)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                try:
                    status, body = server.route(self.path, self.headers.get("Authorization"))
                except Exception as exc:  # a serving bug is a 500, never a dead thread
                    logger.exception("kvctl plugin: serving %s failed", self.path)
                    status, body = 500, _json({"error": f"{type(exc).__name__}: {exc}"})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Bearer realm="kvctl"')
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("kvctl plugin http: " + format, *args)

        return Handler

    def route(self, raw_path: str, authorization: str | None) -> tuple[int, bytes]:
        if not self.authorized(authorization):
            return 401, _json({"error": "missing or wrong bearer token (KVCTL_PLUGIN_TOKEN)"})
        path = raw_path.split("?", 1)[0].rstrip("/") or "/"
        if path == "/healthz":
            return 200, _json({**self.envelope(), **self.runtime.health()})
        if path == "/snapshot":
            if self.runtime.disabled:
                return 503, _json({"error": f"kvctl plugin {self.runtime.disabled_reason}"})
            body = self.snapshot_body()
            if body is None:
                return 503, _json({"error": "no sample yet: the scheduler has not reached "
                                            "a step boundary since the plugin attached"})
            return 200, body
        if path == "/receipts":
            return self.receipts_body(raw_path)
        if path == "/records":
            from engine_adapter.recording.route import records_response

            query = {k: v[0] for k, v in parse_qs(urlsplit(raw_path).query).items()}
            status, doc = records_response(getattr(self.runtime, "recording", None), query)
            return status, _json(doc)
        if path == "/step_samples":
            from engine_adapter.plugin.step_route import step_samples_response

            query = {k: v[0] for k, v in parse_qs(urlsplit(raw_path).query).items()}
            read = getattr(self.runtime, "read_step_timer", None)  # arms an on-demand timer
            status, doc = step_samples_response(read() if read is not None else None, query)
            return status, _json({**self.envelope(), **doc} if status == 200 else doc)
        return 404, _json({"error": f"no route {path}; try /healthz, /snapshot, /receipts, "
                                    "/step_samples or /records"})

    def receipts_body(self, raw_path: str) -> tuple[int, bytes]:
        query = parse_qs(urlsplit(raw_path).query)
        try:
            after = int(query.get("after", ["0"])[0])
        except ValueError:
            return 400, _json({"error": "after must be an integer receipt sequence number"})
        first, next_seq, receipts = self.runtime.receipts.after(after)
        return 200, _json({**self.envelope(), "first": first, "next": next_seq,
                           "receipts": [encode_receipt(r) for r in receipts]})


def _json(doc: dict) -> bytes:
    return json.dumps(doc, allow_nan=False).encode()

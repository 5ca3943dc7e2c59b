"""Serve `/metrics` for a `SnapshotSource` over HTTP, one thread per request.

`serve()` binds (loopback by default), starts the server thread and returns a `MetricsServer`
the caller closes. Paths: `/metrics` (Prometheus text or OpenMetrics, negotiated, gzip when
asked; the kvctl families are rendered once per snapshot and shared by every scrape of it,
see scrape_cache.py), `/` (a one-line pointer), anything else 404.
"""

from __future__ import annotations

import errno
import socket
import threading
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from engine_adapter.protocol import SnapshotSource
from engine_adapter.base.errors import InputError
from telemetry.collector import SnapshotCollector
from telemetry.hygiene import NamespaceLabeler
from telemetry.scrape_cache import ScrapeRenderer

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464  # the OpenTelemetry/Prometheus exporter convention
_LISTEN_BACKLOG = 512  # socketserver's default of 5 drops bursts of concurrent scrapes


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per scrape is noise; errors surface as kvctl_up 0


def _routes(renderer: ScrapeRenderer, filtered_app: Callable) -> Callable:
    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            if "name[]" in parse_qs(environ.get("QUERY_STRING", "")):
                return filtered_app(environ, start_response)  # rare: rendered uncached
            body, headers = renderer.body(environ.get("HTTP_ACCEPT"),
                                          environ.get("HTTP_ACCEPT_ENCODING"))
            start_response("200 OK", headers)
            return [body]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"kvctl exporter: metrics at /metrics\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found; metrics at /metrics\n"]

    return app


class MetricsServer:
    """A running exporter. `close()` stops serving and frees the port; idempotent.

    The source is not closed here: whoever built it owns it.
    """

    def __init__(self, httpd: ThreadingWSGIServer, collector: SnapshotCollector,
                 registry: CollectorRegistry, renderer: ScrapeRenderer) -> None:
        self._httpd = httpd
        self.collector = collector
        self.registry = registry
        self.renderer = renderer
        self.host, self.port = httpd.server_address[:2]
        self._thread = threading.Thread(target=httpd.serve_forever, name="kvctl-exporter",
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        self._closed = False
        self._close_lock = threading.Lock()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(source: SnapshotSource, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
          registry: CollectorRegistry | None = None, labeler: NamespaceLabeler | None = None,
          max_age_s: float = 0.0, process_metrics: bool = True) -> MetricsServer:
    """Start serving `source`'s metrics on host:port (port 0 picks a free one).

    Registers a `SnapshotCollector` (and, unless disabled, the process collector) with
    `registry` (a fresh one by default). Raises InputError when the address cannot be bound.
    """
    if not 0 <= port <= 65535:
        raise InputError(f"port {port} is out of range 0-65535")
    registry = registry if registry is not None else CollectorRegistry()
    collector = SnapshotCollector(source, registry=registry, labeler=labeler, max_age_s=max_age_s)
    per_scrape = None
    if process_metrics:
        per_scrape = CollectorRegistry()
        process = ProcessCollector(registry=per_scrape)
        registry.register(process)  # also in `registry`, for name[] filtered scrapes
    renderer = ScrapeRenderer(collector, per_scrape)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                    flags=socket.AI_PASSIVE)[0][0]
    except socket.gaierror as err:
        raise InputError(f"cannot resolve host {host!r}: {err.strerror}") from None

    class _Server(ThreadingWSGIServer):
        address_family = family
        request_queue_size = _LISTEN_BACKLOG

    try:
        httpd = make_server(host, port, _routes(renderer, make_wsgi_app(registry)), _Server,
                            handler_class=_QuietHandler)
    except OSError as err:
        reason = "address already in use" if err.errno == errno.EADDRINUSE else err.strerror
        raise InputError(f"cannot listen on {host}:{port}: {reason}") from None
    return MetricsServer(httpd, collector, registry, renderer)

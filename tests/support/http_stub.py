"""Serve a stdlib request handler on a loopback port for the length of a `with` block.

    with serving(Handler) as url:      # http://127.0.0.1:PORT
        ...

For tests whose far side is a small HTTP stand-in (what a real SGLang server or router
cannot be made to do on demand). One server thread per handler; the port is picked by the
kernel; the server is shut down however the block ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

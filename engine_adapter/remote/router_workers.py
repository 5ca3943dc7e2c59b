"""A router URL stands for its workers: sglang-router's `GET /workers` lists them.

    expand(["http://router:8000"])  ->  (["http://w0:30000", "http://w1:30001"],
                                         ["http://router:8000"])

A URL that does not answer /workers with a worker list (a plain SGLang server, a dead
address) stays as it is, so a server keeps its own error messages. Only the worker URLs
are read; nothing else of the router's answer is kept.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine_adapter.remote.http_fetch import Unreachable, http_get


def router_workers(url: str, timeout_s: float = 2.0) -> list[str] | None:
    """The workers `url` lists as sglang-router does, or None when it is not a router."""
    base = url.rstrip("/")
    try:
        status, body = http_get(f"{base}/workers", timeout_s=timeout_s)
    except Unreachable:
        return None
    if status != 200:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None
    listed = document.get("workers") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        return None
    urls = [str(w["url"]).rstrip("/") for w in listed if isinstance(w, dict) and w.get("url")]
    return urls or None


def expand(urls: Sequence[str], timeout_s: float = 2.0) -> tuple[list[str], list[str]]:
    """(worker URLs, the routers among `urls`), in order; a router's workers replace it."""
    workers: list[str] = []
    routers: list[str] = []
    for url in urls:
        listed = router_workers(url, timeout_s)
        if listed is None:
            workers.append(url)
        else:
            routers.append(url.rstrip("/"))
            workers.extend(w for w in listed if w not in workers)
    return workers, routers

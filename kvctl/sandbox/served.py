"""Which worker served each request sent through SGLang's router (a fleet, fleet.py).

The method (verified with 2 real workers behind sglang-router 0.3.2, docs/sandbox.md "fleet"):

1. The client gives every request its own `rid` in the /generate body (new_rid()).
   The router forwards the body's `rid` to the worker unchanged, and the worker's reply
   echoes it as `meta_info.id`.
2. kvctl's plugin, in every worker's scheduler, appends one `match` receipt per admitted
   request carrying that request's rid (`Req.rid`) to a bounded log (the last 4,096
   receipts, engine_adapter/plugin/receipt_log.py), read at `GET /receipts?after=N`.
3. ServedBy reads every worker's receipts from where it last stopped and maps rid -> worker.

The receipt is appended when the worker's scheduler processes the request's first prefill
chunk, before the reply is sent, so once a reply is in hand its receipt is readable. A rid
found on two workers (the router retried it elsewhere) is kept with every worker in
`all_workers`; `worker_of` then answers the last one read. A reader that falls more than
4,096 receipts behind on a worker loses the oldest: counted in `lost`. The router's own
response headers name no worker (0.3.2 answers `x-request-id`, its own id), and per-worker
counters (`sglang:num_requests_total`) say how many, not which.

Workers and their plugin endpoints come from the fleet's ready line (`workers`), or from the
router alone: `ServedBy.discover(router_url)` reads the router's `GET /workers` and each
worker's `/server_info` (`kvctl_plugin`: url, port_base, dp_size; one endpoint per DP rank).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Mapping


def new_rid(prefix: str = "kvctl") -> str:
    """A request id no other request has (SGLang refuses a rid that is still running)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def _get_json(url: str, timeout_s: float) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        return json.loads(reply.read())


def plugin_endpoints(server_info: Mapping) -> list[str]:
    """The plugin URLs a worker's /server_info names (one per DP rank); [] without it."""
    entry = server_info.get("kvctl_plugin")
    if not isinstance(entry, Mapping) or not entry.get("url"):
        return []
    url = str(entry["url"])
    base, dp = entry.get("port_base"), int(entry.get("dp_size") or 1)
    if not isinstance(base, int) or dp <= 1:
        return [url]
    head = url.rsplit(":", 1)[0]
    return [f"{head}:{base + rank}" for rank in range(dp)]


class ServedBy:
    """rid -> worker URL, read from every worker's kvctl plugin (module docstring)."""

    def __init__(self, workers: Mapping[str, Iterable[str]], *, timeout_s: float = 10.0) -> None:
        """workers: worker URL -> its plugin URLs (one per DP rank)."""
        self.workers = {w: list(p) for w, p in workers.items()}
        missing = [w for w, p in self.workers.items() if not p]
        if missing:
            raise ValueError(f"no kvctl plugin endpoint for worker(s) {', '.join(missing)}: "
                             "which worker served a request is read from the plugin")
        self.timeout_s = timeout_s
        self._after = {p: 0 for plugins in self.workers.values() for p in plugins}
        self.all_workers: dict[str, list[str]] = {}
        self.lost = 0

    @classmethod
    def from_ready(cls, doc: Mapping) -> ServedBy:
        """From `kvctl sandbox --replicas N --json`'s ready line."""
        return cls({w["url"]: w.get("plugin_urls") or [w["plugin_url"]] for w in doc["workers"]})

    @classmethod
    def discover(cls, router_url: str, *, timeout_s: float = 10.0) -> ServedBy:
        """From the router alone: its /workers, then each worker's /server_info."""
        router_url = router_url.rstrip("/")
        listed = _get_json(f"{router_url}/workers", timeout_s).get("workers", [])
        workers = {}
        for entry in listed:
            url = str(entry["url"]).rstrip("/")
            workers[url] = plugin_endpoints(_get_json(f"{url}/server_info", timeout_s))
        return cls(workers, timeout_s=timeout_s)

    def poll(self) -> int:
        """Read every plugin's receipts since the last poll; returns how many rids were new."""
        new = 0
        for worker, plugins in self.workers.items():
            for plugin in plugins:
                doc = _get_json(f"{plugin}/receipts?after={self._after[plugin]}", self.timeout_s)
                first, after = int(doc["first"]), self._after[plugin]
                if first > after:  # the bounded log dropped receipts this reader never saw
                    self.lost += first - after
                for receipt in doc["receipts"]:
                    if receipt.get("kind") != "match" or receipt.get("request") is None:
                        continue
                    seen = self.all_workers.setdefault(str(receipt["request"]), [])
                    if not seen:
                        new += 1
                    seen.append(worker)
                self._after[plugin] = int(doc["next"])
        return new

    def worker_of(self, rid: str, *, poll: bool = True) -> str | None:
        """The worker that admitted `rid` (the last one read, if the router retried it)."""
        if poll and rid not in self.all_workers:
            self.poll()
        seen = self.all_workers.get(rid)
        return seen[-1] if seen else None

    def attribute(self, rids: Iterable[str]) -> dict[str, str | None]:
        """rid -> worker for every rid (one poll; None: no worker admitted it)."""
        self.poll()
        return {rid: self.worker_of(rid, poll=False) for rid in rids}

"""A fleet of SGLang workers: per-worker reads, an aggregate snapshot, and routing what-ifs.

`Fleet` is itself a SnapshotSource (its snapshot is the aggregate, which carries every
replica beside the sum and, given the router's metrics address, the router's own figures:
engine_adapter/fleet_view.py), so the exporter and the TUI can watch a fleet the way they
watch one worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from engine_adapter.receipts import Receipt
from engine_adapter.remote.fleet_aggregate import aggregate
from engine_adapter.remote.remote_engine import RemoteEngine, RemoteRead
from engine_adapter.remote.router_metrics import read_router_metrics
from engine_adapter.remote.routing import Candidate, RouteDecision, choose_worker, page_hashes
from engine_adapter.remote.wire import GPU
from engine_adapter.snapshot import Snapshot
from engine_adapter.base.errors import InputError


@dataclass(frozen=True, kw_only=True)
class FleetRead:
    workers: tuple[RemoteRead, ...]
    aggregate: Snapshot


@dataclass(frozen=True, kw_only=True)
class PromptMatch:
    """How much of one prompt a worker holds: on GPU, and in any tier (GPU, host, disk)."""

    worker: str
    page_size: int
    device_tokens: int
    any_tier_tokens: int


class Fleet:
    """Several RemoteEngines. `kv_events[i]` / `plugin_urls[i]` (optional) override worker i's
    event endpoint / kvctl plugin endpoint (else both come from its /server_info).

    `router_metrics`: the router's Prometheus endpoint (router_metrics.py), read with every
    read(); None: no router figures. Owns its engines: `close()` closes them all (idempotent).
    """

    def __init__(self, urls: Sequence[str], *, kv_events: Sequence[str | None] = (),
                 plugin_urls: Sequence[str | None] = (), router_metrics: str | None = None,
                 **options):
        if not urls:
            raise InputError("a fleet needs at least one --url")
        for option, given in (("--kv-events", kv_events), ("--plugin-url", plugin_urls)):
            if len(given) > len(urls):
                raise InputError(f"{len(given)} {option} for {len(urls)} --url")
        endpoints = list(kv_events) + [None] * (len(urls) - len(kv_events))
        plugins = list(plugin_urls) + [None] * (len(urls) - len(plugin_urls))
        self.engines = tuple(
            RemoteEngine(url, kv_events=endpoint, plugin_url=plugin, **options)
            for url, endpoint, plugin in zip(urls, endpoints, plugins, strict=True)
        )
        self._seq = 0
        self.router_metrics = router_metrics
        self._timeout_s = float(options.get("timeout_s", 2.0))

    def read(self) -> FleetRead:
        self._seq += 1
        reads = tuple(engine.read() for engine in self.engines)
        router = None
        if self.router_metrics is not None:
            router = read_router_metrics(self.router_metrics, [r.url for r in reads],
                                         timeout_s=self._timeout_s)
        return FleetRead(
            workers=reads,
            aggregate=aggregate(
                [(r.url, r.snapshot) for r in reads], seq=self._seq, wall_time_s=time.time(),
                loads=[r.load for r in reads], router=router,
            ),
        )

    def snapshot(self) -> Snapshot:
        return self.read().aggregate

    def take_receipts(self) -> list[Receipt]:
        return []

    def close(self) -> None:
        for engine in self.engines:
            engine.close()

    def wait_for_events(self, timeout_s: float) -> None:
        """Give every worker's event stream up to `timeout_s` to finish its first replay."""
        deadline = time.monotonic() + timeout_s
        for engine in self.engines:
            engine.wait_for_events(max(0.0, deadline - time.monotonic()))

    def match_prompt(
        self, reads: Sequence[RemoteRead], tokens: Sequence[int], *, cache_salt: str | None = None,
        extra_key: str | None = None,
    ) -> list[PromptMatch | None]:  # fmt: skip
        """Per worker, the cached prefix of `tokens` (None: no info or no event stream)."""
        matches: list[PromptMatch | None] = []
        for engine, read in zip(self.engines, reads, strict=True):
            info = read.info
            if info is None or engine.stream is None:
                matches.append(None)
                continue
            events = info.kv_events
            block_size = (events.block_size if events else None) or info.page_size
            hashes = page_hashes(
                tokens, block_size, cache_salt=cache_salt, extra_key=extra_key,
                dynamo_format=bool(events and events.event_format == "dynamo"),
            )  # fmt: skip
            device, any_tier = engine.match(hashes, GPU), engine.match(hashes, None)
            matches.append(
                PromptMatch(
                    worker=read.url, page_size=block_size,
                    device_tokens=device.tokens, any_tier_tokens=any_tier.tokens,
                )
            )  # fmt: skip
        return matches

    def route(
        self, reads: Sequence[RemoteRead], tokens: Sequence[int], *, cache_salt: str | None = None,
        extra_key: str | None = None, mu: float = 0.5, gamma: float = 1.0,
        max_load: int | None = None,
    ) -> tuple[RouteDecision, list[PromptMatch | None]]:  # fmt: skip
        """Seed 003 figure 7's affinity-load choice among `reads` for one prompt."""
        matches = self.match_prompt(reads, tokens, cache_salt=cache_salt, extra_key=extra_key)
        candidates = []
        for read, match in zip(reads, matches, strict=True):
            reason = ""
            if not read.snapshot.connected:
                reason = "disconnected"
            elif match is None:
                reason = "no KV-event stream (prefix not observable)"
            candidates.append(
                Candidate(
                    name=read.url, matched_tokens=match.device_tokens if match else 0,
                    load=read.load, reason=reason,
                )
            )  # fmt: skip
        sizes = {m.page_size for m in matches if m is not None}
        page_size = sizes.pop() if len(sizes) == 1 else 1
        decision = choose_worker(
            len(tokens), page_size, candidates, mu=mu, gamma=gamma, max_load=max_load
        )
        return decision, matches

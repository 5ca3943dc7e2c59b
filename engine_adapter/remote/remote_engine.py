"""`RemoteEngine`: a read-only SnapshotSource over a live SGLang server.

It observes three surfaces SGLang publishes and nothing else:

::

    GET /server_info (or /get_server_info)   page size, pool size, model, KV-event endpoint
    GET /metrics                              sglang:* pool gauges and counters
    ZMQ SUB + ROUTER replay (EventStream)     BlockStored / BlockRemoved / AllBlocksCleared
                                              -> PrefixMirror -> tree shape, prefix matches
    GET <plugin>/healthz, /snapshot           optional: kvctl's plugin inside the scheduler
                                              (plugin_client.py, merged by plugin_merge.py)

The plugin's address is `plugin_url`, else the `kvctl_plugin` entry of /server_info; its
token `plugin_token`, else $KVCTL_PLUGIN_TOKEN. A server with `dp_size` N has one plugin
endpoint per DP rank (address + r): all are read and summed (plugin_ranks.py). A plugin that is not "ok" leaves the remote
read as it is plus a `plugin_unavailable` alert: nothing it said before is reused.

`read()` never raises for a sick server: an unreachable server, a server without metrics
or a malformed reply gives a `connected=False` snapshot (the last good numbers, marked
stale) and schedules the next attempt with exponential backoff; reads before then return
at once. A changed `startup_time` or a counter that went backwards means the server
restarted: the mirror is rebuilt from the new publisher.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from engine_adapter.receipts import Receipt
from engine_adapter.remote.backoff import Backoff
from engine_adapter.remote.event_mirror import PrefixMatch
from engine_adapter.remote.event_stream import EventStream, StreamStats
from engine_adapter.remote.http_fetch import Unreachable, normalize_base_url
from engine_adapter.remote.metrics_scrape import MetricsReading, MetricsUnavailable, scrape_metrics
from engine_adapter.remote.mirror_shape import MirrorShape
from engine_adapter.remote.plugin_client import TOKEN_ENV, PluginRead
from engine_adapter.remote.plugin_merge import merge, plugin_down
from engine_adapter.remote.plugin_ranks import PluginRanks
from engine_adapter.remote.reconcile import (
    DriftTolerance,
    RemoteReconciliation,
    drift_alert,
    reconcile,
)
from engine_adapter.remote.server_info import MalformedServerInfo, ServerInfo, fetch_server_info
from engine_adapter.remote.snapshot_build import build_snapshot, disconnected_snapshot
from engine_adapter.remote.wire import GPU
from engine_adapter.snapshot import Alert, Snapshot
from engine_adapter.base.errors import InputError


@dataclass(frozen=True, kw_only=True)
class RemoteRead:
    """One read of one worker: the engine-neutral snapshot plus what only a remote attach has."""

    url: str
    snapshot: Snapshot
    info: ServerInfo | None
    stream: StreamStats | None
    shape: MirrorShape | None
    reconciliation: RemoteReconciliation | None
    running_requests: int | None
    queued_requests: int | None
    malformed_metric_lines: int
    malformed_server_info: int
    last_error: str | None
    retry_in_s: float | None
    plugin: PluginRead | None = None  # None: no plugin configured or discovered

    @property
    def load(self) -> int | None:
        """Queue depth (running + waiting requests), the L_j of seed 003 figure 7."""
        if self.running_requests is None and self.queued_requests is None:
            return None
        return (self.running_requests or 0) + (self.queued_requests or 0)


class RemoteEngine:
    """Attach to `url`. KV events come from `kv_events` (else the server's descriptor).

    Mutates only itself; `close()` stops the event thread (idempotent). Control methods of
    `ControllableSource` raise InputError: a remote attach is read-only.
    """

    read_only = True

    def __init__(
        self,
        url: str,
        *,
        kv_events: str | None = None,
        kv_replay: str | None = None,
        topic: str | None = None,
        timeout_s: float = 2.0,
        tolerance: DriftTolerance | None = None,
        backoff: Backoff | None = None,
        info_refresh_s: float = 30.0,
        resync_interval_s: float = 5.0,
        replay_timeout_s: float = 2.0,
        events: bool = True,
        plugin_url: str | None = None,
        plugin_token: str | None = None,
        plugin_discovery: bool = True,
    ) -> None:
        self.url = normalize_base_url(url)
        self._plugin_token = plugin_token if plugin_token is not None else (
            os.environ.get(TOKEN_ENV) or None)
        self._plugin_discovery = plugin_discovery
        self._plugin: PluginRanks | None = None  # built at the first read (needs dp_size)
        self._plugin_url = (None if plugin_url is None else  # InputError before anything runs
                            normalize_base_url(plugin_url, what="--plugin-url"))
        for option, endpoint in (("--kv-events", kv_events), ("--kv-replay", kv_replay)):
            if endpoint is not None and not endpoint.startswith(("tcp://", "ipc://")):
                raise InputError(f"{option} {endpoint!r} is not a tcp://HOST:PORT endpoint")
        self._kv_events, self._kv_replay, self._topic = kv_events, kv_replay, topic
        self._timeout_s = timeout_s
        self._tolerance = tolerance or DriftTolerance()
        self._backoff = backoff or Backoff()
        self._info_refresh_s = info_refresh_s
        self._stream_options = dict(
            resync_interval_s=resync_interval_s, replay_timeout_s=replay_timeout_s
        )
        self._events_enabled = events
        self._lock = threading.Lock()
        self._attached_at = time.monotonic()
        self._seq = 0
        self._info: ServerInfo | None = None
        self._info_read_at = 0.0
        self._info_stale = True
        self._stream: EventStream | None = None
        self._last: Snapshot | None = None
        self._last_requests_total: int | None = None
        self._last_error: str | None = None
        self._drift_streak = 0
        self._malformed_info = 0
        self._malformed_seen = (0, 0, 0)
        self._closed = False

    # ---- SnapshotSource -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self.read().snapshot

    def take_receipts(self) -> list[Receipt]:
        """A remote server emits no kvctl receipts; its KV events feed the mirror instead."""
        return []

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._stream is not None:
                self._stream.close()

    def pause(self) -> None:
        raise InputError("a remote attach is read-only: it cannot pause the server")

    def resume(self) -> None:
        raise InputError("a remote attach is read-only: it cannot resume the server")

    def flush_cache(self) -> None:
        raise InputError("a remote attach is read-only: use the server's /flush_cache")

    # ---- reads ----------------------------------------------------------------------------

    def read(self) -> RemoteRead:
        """One consistent read (see module docstring). Never raises for server trouble."""
        with self._lock:
            self._seq += 1
            now = time.monotonic()
            if not self._backoff.ready(now):
                return self._disconnected(now)
            try:
                info = self._refresh_info(now)
                metrics = scrape_metrics(self.url, timeout_s=self._timeout_s)
                self._watch_restart(metrics)
                self._ensure_stream(info)
                stats, shape = self._stream.read() if self._stream else (None, None)
                rec = self._reconcile(info, metrics, shape)
                snapshot = build_snapshot(
                    seq=self._seq, attached_s=now - self._attached_at, wall_time_s=time.time(),
                    info=info, metrics=metrics, stream=stats, shape=shape,
                    alerts=self._alerts(rec, stats, metrics), notes=self._notes(stats),
                )  # fmt: skip
                plugin = self._read_plugin(info, now)
                if plugin is not None:
                    snapshot = (merge(snapshot, plugin.snapshot, plugin_url=plugin.url)
                                if plugin.ok else plugin_down(snapshot, plugin))
            except (Unreachable, MetricsUnavailable, MalformedServerInfo) as err:
                if isinstance(err, MalformedServerInfo):
                    self._malformed_info += 1
                self._last_error = str(err)
                self._info_stale = True
                self._backoff.failed(now)
                return self._disconnected(now)
            self._backoff.succeeded()
            self._last_error = None
            self._last = snapshot
            return RemoteRead(
                url=self.url, snapshot=snapshot, info=info, stream=stats, shape=shape,
                reconciliation=rec,
                running_requests=metrics.count("sglang:num_running_reqs"),
                queued_requests=metrics.count("sglang:num_queue_reqs"),
                malformed_metric_lines=metrics.malformed_lines,
                malformed_server_info=self._malformed_info, last_error=None, retry_in_s=None,
                plugin=plugin,
            )  # fmt: skip

    def wait_for_events(self, timeout_s: float) -> bool:
        """Read once (to discover the stream), then wait for its first replay; False if none."""
        self.read()
        stream = self._stream
        if stream is None:
            return False
        return stream.wait_until(lambda s: s.seeded, timeout=timeout_s)

    def match(self, hashes: Sequence[int], medium: str | None = GPU) -> PrefixMatch | None:
        """Longest mirrored prefix of `hashes` (None when no KV-event stream is attached)."""
        stream = self._stream
        return None if stream is None else stream.match(hashes, medium)

    @property
    def stream(self) -> EventStream | None:
        return self._stream

    @property
    def last_error(self) -> str | None:
        """Why the last read was disconnected (None after a connected read)."""
        return self._last_error

    # ---- internals ------------------------------------------------------------------------

    def _read_plugin(self, info: ServerInfo, now: float) -> PluginRead | None:
        if self._plugin is None:
            base = self._plugin_url or (info.plugin_url if self._plugin_discovery else None)
            if base is None:
                return None
            try:
                self._plugin = PluginRanks(base, dp_size=info.dp_size, token=self._plugin_token,
                                           timeout_s=self._timeout_s)
            except InputError:  # an unusable announcement: run without the plugin
                self._plugin_discovery = False
                return None
        return self._plugin.read(now) if self._plugin is not None else None

    def _refresh_info(self, now: float) -> ServerInfo:
        if self._info is not None and not self._info_stale:
            if now - self._info_read_at < self._info_refresh_s:
                return self._info
        info = fetch_server_info(self.url, timeout_s=self._timeout_s)
        previous = self._info
        if previous is not None and info.startup_time != previous.startup_time:
            self._restarted()
        self._info, self._info_read_at, self._info_stale = info, now, False
        return info

    def _watch_restart(self, metrics: MetricsReading) -> None:
        total = metrics.count("sglang:num_requests_total") or 0
        if self._last_requests_total is not None and total < self._last_requests_total:
            self._restarted()  # a Prometheus counter only goes backwards when its process restarts
        self._last_requests_total = total

    def _restarted(self) -> None:
        self._last_requests_total = None
        if self._stream is not None:
            self._stream.request_resync()

    def _ensure_stream(self, info: ServerInfo) -> None:
        if self._stream is not None or self._closed or not self._events_enabled:
            return
        described = info.kv_events
        endpoint = self._kv_events or (described.endpoint if described else None)
        if endpoint is None:
            return
        replay = self._kv_replay or (described.replay_endpoint if described else None)
        topic = self._topic if self._topic is not None else (described.topic if described else "")
        self._stream = EventStream(
            endpoint, replay_endpoint=replay, topic=topic, **self._stream_options
        ).start()

    def _reconcile(
        self, info: ServerInfo, metrics: MetricsReading, shape: MirrorShape | None
    ) -> RemoteReconciliation | None:
        evictable = metrics.count("sglang:kv_evictable_tokens")
        used = metrics.count("sglang:kv_used_tokens")
        pool = metrics.count("sglang:max_total_num_tokens") or info.max_total_num_tokens
        if shape is None or evictable is None or used is None or pool is None:
            return None
        result = reconcile(
            mirror_blocks=dict(shape.blocks_by_medium).get(GPU, 0), page_size=info.page_size,
            evictable_tokens=evictable, used_tokens=used, pool_tokens=pool,
            tolerance=self._tolerance,
        )  # fmt: skip
        self._drift_streak = 0 if result.within_tolerance else self._drift_streak + 1
        return result

    def _alerts(
        self, rec: RemoteReconciliation | None, stats: StreamStats | None, metrics: MetricsReading
    ) -> tuple[Alert, ...]:
        alerts: list[Alert] = []
        if rec is not None:
            alert = drift_alert(
                rec, streak=self._drift_streak, required=self._tolerance.consecutive_reads,
                mirror_complete=stats.mirror_complete if stats else True,
            )  # fmt: skip
            if alert is not None:
                alerts.append(alert)
        if stats is not None and stats.failure is not None:
            alerts.append(
                Alert(
                    name="kv_event_stream_failed",
                    severity="critical",
                    evidence=f"{stats.endpoint}: {stats.failure}; the mirror is frozen",
                )
            )
        if stats is not None and not stats.mirror_complete:
            alerts.append(Alert(
                name="kv_event_batches_lost", severity="warning",
                evidence=(
                    f"{stats.batches_lost} KV-event batches lost ({stats.gaps_detected} gaps, "
                    f"{stats.gaps_filled} filled from replay); the mirror stays incomplete "
                    "until the next AllBlocksCleared"
                ),
            ))  # fmt: skip
        seen = (
            stats.malformed_messages if stats else 0,
            metrics.malformed_lines,
            self._malformed_info,
        )
        if any(now > before for now, before in zip(seen, self._malformed_seen, strict=True)):
            example = (stats.last_malformed if stats else None) or metrics.first_malformed
            alerts.append(Alert(
                name="remote_malformed_input", severity="warning",
                evidence=(
                    f"malformed: {seen[0]} KV-event messages, {seen[1]} metric lines, "
                    f"{seen[2]} server-info replies (skipped); e.g. {example!r}"
                ),
            ))  # fmt: skip
        self._malformed_seen = seen
        return tuple(alerts)

    def _notes(self, stats: StreamStats | None) -> tuple[str, ...]:
        if stats is None:
            return ()
        return (
            f"kv events: next seq {stats.next_seq}, {stats.batches_applied} batches, "
            f"{stats.gaps_detected} gaps ({stats.gaps_filled} filled), "
            f"{stats.publisher_restarts} publisher restarts, {stats.malformed_messages} malformed",
        )

    def _disconnected(self, now: float) -> RemoteRead:
        retry = self._backoff.retry_in(now)
        alert = Alert(
            name="remote_server_unreachable",
            severity="critical",
            evidence=f"{self._last_error}; attempt {self._backoff.failures}, next in {retry:.1f} s",
        )
        snapshot = disconnected_snapshot(
            seq=self._seq, attached_s=now - self._attached_at, wall_time_s=time.time(),
            last=self._last, alert=alert,
        )  # fmt: skip
        stats = self._stream.stats() if self._stream is not None else None
        return RemoteRead(
            url=self.url, snapshot=snapshot, info=self._info, stream=stats, shape=None,
            reconciliation=None, running_requests=None, queued_requests=None,
            malformed_metric_lines=0, malformed_server_info=self._malformed_info,
            last_error=self._last_error, retry_in_s=retry,
        )  # fmt: skip

"""Follow a ZmqEventPublisher: SUB for live batches, ROUTER replay for gaps, into a mirror.

Sequence bookkeeping (one publisher numbers its batches 0, 1, 2, ... from its start):

::

    next_seq = 4, live seq 7 arrives   -> gap [4, 7): replay from 4, apply 4..7, next_seq = 8
    live seq 2 arrives after live 9    -> the SUB socket saw numbers go backwards: a new
                                          publisher (server restart). Clear the mirror and
                                          replay from 0.
    live seq 5 arrives, next_seq = 8   -> already applied through replay: a duplicate, skipped
    replay from 0 returns 40.. first   -> the publisher's buffer rolled over: 40 batches lost

A live batch whose payload does not decode is counted as malformed and fetched again from
the replay socket (the publisher buffers the bytes it sent). A batch that is lost for good
(no replay socket, buffer rolled over, malformed in the buffer too) sets
`mirror_complete=False` until the next AllBlocksCleared or resync makes the mirror exact
again. While the stream is idle it asks the replay socket for anything after `next_seq`
every `resync_interval_s`, which also recovers batches the SUB missed while joining.

One background thread owns both ZMQ sockets (ZMQ sockets are not thread-safe); readers
get consistent copies through `stats()`, `read()` and `match()` under one lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import zmq

from engine_adapter.remote.event_mirror import PrefixMatch, PrefixMirror
from engine_adapter.remote.mirror_shape import MirrorShape
from engine_adapter.remote.wire import (
    END_OF_REPLAY,
    GPU,
    AllCleared,
    EventBatch,
    MalformedMessage,
    decode_live,
    decode_payload,
    decode_seq,
)


@dataclass(frozen=True, kw_only=True)
class StreamStats:
    endpoint: str
    replay_endpoint: str | None
    running: bool
    next_seq: int
    seeded: bool = False  # the first replay after attaching has finished (or timed out)
    live_messages: int = 0  # received on the SUB socket (replayed batches are not counted)
    batches_applied: int = 0
    events_applied: int = 0
    unknown_events: int = 0
    duplicates_skipped: int = 0
    gaps_detected: int = 0
    gaps_filled: int = 0
    batches_lost: int = 0
    replays_requested: int = 0
    replay_timeouts: int = 0
    publisher_restarts: int = 0
    resyncs: int = 0
    malformed_messages: int = 0
    last_malformed: str | None = None
    mirror_complete: bool = True
    last_batch_wall_s: float | None = None
    failure: str | None = None  # why the stream thread stopped on its own (bad endpoint, ...)


class EventStream:
    """Subscribe to `endpoint` (and replay from `replay_endpoint`) into a PrefixMirror.

    Mutates only its own mirror and counters. `start()` spawns the thread; `close()` stops
    it and releases the sockets (idempotent). Never raises on bad input: malformed
    messages are counted in `StreamStats.malformed_messages` and skipped.
    """

    _BATCH_DRAIN = 256  # live messages handled per poll wake-up

    def __init__(
        self,
        endpoint: str,
        *,
        replay_endpoint: str | None = None,
        topic: str = "",
        resync_interval_s: float = 5.0,
        replay_timeout_s: float = 2.0,
        poll_interval_s: float = 0.05,
    ) -> None:
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self._topic = topic.encode("utf-8")
        self._resync_interval_s = resync_interval_s
        self._replay_timeout_s = replay_timeout_s
        self._poll_ms = max(1, int(poll_interval_s * 1000))
        self._mirror = PrefixMirror()
        self._lock = threading.RLock()  # re-entrant: wait_until predicates may call readers
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._resync = threading.Event()
        self._thread: threading.Thread | None = None
        self._dealer: zmq.Socket | None = None
        self._last_live_seq: int | None = None
        self._stats = StreamStats(
            endpoint=endpoint, replay_endpoint=replay_endpoint, running=False, next_seq=0
        )

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> "EventStream":
        if self._thread is None:
            self._update(running=True)
            self._thread = threading.Thread(target=self._run, name="kvctl-kv-events", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        self._update(running=False)

    def request_resync(self) -> None:
        """Forget the mirror and rebuild it from replay (e.g. the server restarted)."""
        self._resync.set()

    # ---- readers --------------------------------------------------------------------------

    def stats(self) -> StreamStats:
        with self._lock:
            return self._stats

    def read(self, *, top_k: int = 5) -> tuple[StreamStats, MirrorShape]:
        """Stats and mirror shape from the same instant."""
        with self._lock:
            return self._stats, self._mirror.shape(top_k=top_k)

    def match(self, hashes: Sequence[int], medium: str | None = GPU) -> PrefixMatch:
        with self._lock:
            return self._mirror.match(hashes, medium)

    def hashes(self, medium: str | None = None) -> frozenset[int]:
        with self._lock:
            return self._mirror.hashes(medium)

    def check_integrity(self) -> None:
        with self._lock:
            self._mirror.check_integrity()

    def wait_until(self, predicate: Callable[[StreamStats], bool], timeout: float) -> bool:
        """Block until `predicate(stats)` holds or `timeout` seconds pass; True if it held."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self._stats), timeout=timeout)

    # ---- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        context = zmq.Context()
        sub = context.socket(zmq.SUB)
        try:
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.RCVHWM, 100_000)
            sub.setsockopt(zmq.SUBSCRIBE, self._topic)
            sub.connect(self.endpoint)
            self._replay(context, 0)  # seed the mirror with whatever the publisher buffered
            self._update(seeded=True)
            idle_since = time.monotonic()
            while not self._stop.is_set():
                if self._resync.is_set():
                    self._resync.clear()
                    self._reset(resyncs=self._stats.resyncs + 1)
                    self._replay(context, 0)
                if sub.poll(self._poll_ms):
                    for _ in range(self._BATCH_DRAIN):
                        try:
                            frames = sub.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._on_live(context, frames)
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= self._resync_interval_s:
                    self._replay(context, self._stats.next_seq)
                    idle_since = time.monotonic()
        except Exception as err:  # a bad endpoint or a ZMQ failure: report it, never raise
            self._update(running=False, failure=f"{type(err).__name__}: {err}")
        finally:
            sub.close(linger=0)
            if self._dealer is not None:
                self._dealer.close(linger=0)
                self._dealer = None
            context.term()

    def _on_live(self, context: zmq.Context, frames: list[bytes]) -> None:
        self._update(live_messages=self._stats.live_messages + 1)
        try:
            batch = decode_live(frames)
        except MalformedMessage as err:
            if err.seq is not None and err.seq >= self._stats.next_seq:
                self._count_malformed(err)
                self._replay(context, self._stats.next_seq)  # the publisher kept a good copy
                if self._stats.next_seq <= err.seq:
                    self._consume_lost(err.seq)
            elif err.seq is None:
                self._count_malformed(err)
            return
        if self._last_live_seq is not None and batch.seq < self._last_live_seq:
            self._reset(publisher_restarts=self._stats.publisher_restarts + 1)
        self._last_live_seq = batch.seq
        expected = self._stats.next_seq
        if batch.seq > expected:
            self._update(gaps_detected=self._stats.gaps_detected + 1)
            self._replay(context, expected)
            if self._stats.next_seq >= batch.seq:  # [expected, seq) covered
                self._update(gaps_filled=self._stats.gaps_filled + 1)
        self._accept(batch)

    def _replay(self, context: zmq.Context, start: int) -> None:
        """Ask the ROUTER for every buffered batch from `start`; apply until the end marker."""
        if self.replay_endpoint is None:
            return
        if self._dealer is None:
            self._dealer = context.socket(zmq.DEALER)
            self._dealer.setsockopt(zmq.LINGER, 0)
            self._dealer.connect(self.replay_endpoint)
        self._update(replays_requested=self._stats.replays_requested + 1)
        self._dealer.send_multipart([b"", start.to_bytes(8, "big")])
        deadline = time.monotonic() + self._replay_timeout_s
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A dead or restarted ROUTER: drop the socket so late replies cannot mix in.
                self._update(replay_timeouts=self._stats.replay_timeouts + 1)
                self._dealer.close(linger=0)
                self._dealer = None
                return
            if not self._dealer.poll(int(min(remaining, 0.1) * 1000) + 1):
                continue
            frames = self._dealer.recv_multipart()
            if len(frames) != 4 or frames[0] != b"":
                self._consume_malformed(MalformedMessage(f"replay reply has {len(frames)} frames"))
                continue
            if frames[2] == END_OF_REPLAY:
                return
            try:
                batch = decode_payload(frames[3], seq=decode_seq(frames[2]))
            except MalformedMessage as err:
                self._consume_malformed(err)
                continue
            self._accept(batch)
            deadline = time.monotonic() + self._replay_timeout_s

    # ---- state changes (all under the lock) -----------------------------------------------

    def _accept(self, batch: EventBatch) -> None:
        with self._changed:
            stats = self._stats
            if batch.seq < stats.next_seq:
                self._set(duplicates_skipped=stats.duplicates_skipped + 1)
                return
            lost = batch.seq - stats.next_seq
            self._mirror.apply_all(batch.events)
            cleared = any(isinstance(e, AllCleared) for e in batch.events)
            self._set(
                next_seq=batch.seq + 1,
                batches_applied=stats.batches_applied + 1,
                events_applied=stats.events_applied + len(batch.events),
                unknown_events=stats.unknown_events + batch.unknown_events,
                batches_lost=stats.batches_lost + lost,
                mirror_complete=cleared or (stats.mirror_complete and lost == 0),
                last_batch_wall_s=time.time(),
            )

    def _consume_malformed(self, err: MalformedMessage) -> None:
        """A bad replay reply: count it; a readable seq counts as received (its batch lost)."""
        if err.seq is not None and err.seq < self._stats.next_seq:
            return  # the same bad batch again
        self._count_malformed(err)
        if err.seq is not None:
            self._consume_lost(err.seq)

    def _count_malformed(self, err: MalformedMessage) -> None:
        with self._changed:
            self._set(
                malformed_messages=self._stats.malformed_messages + 1, last_malformed=str(err)
            )

    def _consume_lost(self, seq: int) -> None:
        """Batches next_seq..seq will never be applied: skip past them, mark the mirror."""
        with self._changed:
            stats = self._stats
            self._set(
                next_seq=seq + 1,
                batches_lost=stats.batches_lost + seq - stats.next_seq + 1,
                mirror_complete=False,
            )

    def _reset(self, **changes) -> None:
        with self._changed:
            self._mirror.clear()
            self._last_live_seq = None
            self._set(next_seq=0, mirror_complete=True, **changes)

    def _update(self, **changes) -> None:
        with self._changed:
            self._set(**changes)

    def _set(self, **changes) -> None:
        values = {**self._stats.__dict__, **changes}
        self._stats = StreamStats(**values)
        self._changed.notify_all()

"""A bounded, loss-counting buffer of finished requests' trace records.

Contract:
- `on_arrival(rid, token_ids, arrival_s)` runs in the serving thread when a request arrives:
  it hashes the prompt (BlockHasher) and keeps only the digests and the length. The token ids
  are not kept.
- `on_finish(rid, output_tokens)` completes the record and queues it for the reader.
- `read(ack, limit)` runs in the endpoint's thread: it drops every record with a sequence
  number <= `ack` (the reader has them) and returns the next ones, without blocking on the
  serving thread beyond a short lock.
- Never slows the server: when the queue holds `capacity` unread records, a finished record
  is dropped and counted (`dropped`), never waited on; when `max_pending` requests are in
  flight, the oldest of them is forgotten and counted (its finish may never come: an abort
  from the waiting queue), so a leak cannot shut recording out.
- A second arrival of a rid still in flight (a retracted request re-queued) is ignored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from engine_adapter.recording.block_hasher import BlockHasher


@dataclass(frozen=True, slots=True)
class TrafficRecord:
    """One finished request: arrival (seconds, the server's clock), lengths, block digests."""

    seq: int  # finish order, 1-based: what a reader acknowledges
    arrival_s: float
    input_length: int
    output_length: int
    blocks: tuple[bytes, ...]
    arrival_seq: int = 0  # arrival order, 1-based: breaks ties of equal arrival_s


@dataclass(frozen=True, slots=True)
class RecordBatch:
    records: tuple[TrafficRecord, ...]
    dropped: int  # records lost to a full queue or too many in flight, since the start
    in_flight: int  # requests arrived and not finished yet
    block_tokens: int


class TrafficRecorder:
    def __init__(self, hasher: BlockHasher, *, capacity: int = 65_536,
                 max_pending: int = 65_536) -> None:
        self.hasher = hasher
        self._capacity = capacity
        self._max_pending = max_pending
        self._pending: OrderedDict[str, tuple[float, int, tuple[bytes, ...], int]] = OrderedDict()
        self._queue: deque[TrafficRecord] = deque()
        self._lock = threading.Lock()
        self._next_seq = 1
        self._arrivals = 0
        self.dropped = 0

    def on_arrival(self, rid: str, token_ids: Sequence[int], arrival_s: float, *,
                   namespace: bytes = b"") -> None:
        if rid in self._pending:  # re-queued (a retraction), not a new arrival
            return
        # hashing outside the lock: the costly part
        blocks = tuple(self.hasher.hash_prompt(token_ids, namespace=namespace))
        with self._lock:
            if len(self._pending) >= self._max_pending:
                # the oldest in flight is likeliest a request whose finish was never seen
                # (aborted from the queue): forget it rather than refuse all new traffic
                self._pending.popitem(last=False)
                self.dropped += 1
            self._arrivals += 1
            self._pending[rid] = (arrival_s, len(token_ids), blocks, self._arrivals)

    def on_finish(self, rid: str, output_tokens: int) -> None:
        with self._lock:
            started = self._pending.pop(rid, None)
            if started is None:  # arrived before recording began, or dropped at arrival
                return
            if len(self._queue) >= self._capacity:
                self.dropped += 1
                return
            arrival_s, input_length, blocks, arrival_seq = started
            self._queue.append(TrafficRecord(self._next_seq, arrival_s, input_length,
                                             max(int(output_tokens), 0), blocks, arrival_seq))
            self._next_seq += 1

    def on_abort(self, rid: str) -> None:
        """A request that ends without output (aborted) is not part of the trace."""
        with self._lock:
            self._pending.pop(rid, None)

    def read(self, *, ack: int = 0, limit: int = 4096) -> RecordBatch:
        with self._lock:
            while self._queue and self._queue[0].seq <= ack:
                self._queue.popleft()
            records = tuple(self._queue[i] for i in range(min(limit, len(self._queue))))
            return RecordBatch(records=records, dropped=self.dropped,
                               in_flight=len(self._pending),
                               block_tokens=self.hasher.block_tokens)

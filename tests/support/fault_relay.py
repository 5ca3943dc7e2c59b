"""A KV-event relay that breaks things on purpose: drop, corrupt or inject messages.

::

    ZmqEventPublisher --PUB--> [SUB  FaultRelay  PUB] --> EventStream (SUB)
          ROUTER replay <--------------------------------------- DEALER (direct)

Messages pass through unchanged unless their sequence number is in `drop` (not forwarded)
or `corrupt` (payload replaced by bytes that are not msgpack). `inject(frames)` sends raw
frames downstream. Used by the fault tests and for drills against a real server; the
replay socket is not relayed, so the subscriber can repair what the relay broke.
"""

from __future__ import annotations

import queue
import threading

import zmq

CORRUPT_PAYLOAD = b"\xc1\xc1 not msgpack"  # 0xc1 is never valid msgpack


class FaultRelay:
    """Relay `upstream` (a PUB endpoint) to a fresh loopback PUB endpoint (`self.endpoint`).

    `drop` and `corrupt` may be changed while running (sets of sequence numbers).
    `close()` stops the thread and the sockets (idempotent).
    """

    def __init__(
        self, upstream: str, *, drop: set[int] | None = None, corrupt: set[int] | None = None
    ):
        self.drop: set[int] = set(drop or ())
        self.corrupt: set[int] = set(corrupt or ())
        self.forwarded = 0
        self.dropped: list[int] = []
        self.corrupted: list[int] = []
        self._inject: queue.Queue[list[bytes]] = queue.Queue()
        self._stop = threading.Event()
        self._context = zmq.Context()
        self._sub = self._context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.connect(upstream)
        self._pub = self._context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind("tcp://127.0.0.1:*")
        self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._thread = threading.Thread(target=self._run, name="kvctl-fault-relay", daemon=True)
        self._thread.start()

    def inject(self, frames: list[bytes]) -> None:
        """Send raw `frames` downstream (from the relay thread, in order)."""
        self._inject.put(list(frames))

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._context.term()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                while not self._inject.empty():
                    self._pub.send_multipart(self._inject.get_nowait())
                if not self._sub.poll(20):
                    continue
                frames = self._sub.recv_multipart()
                seq = int.from_bytes(frames[1], "big") if len(frames) == 3 else None
                if seq in self.drop:
                    self.dropped.append(seq)
                    continue
                if seq in self.corrupt:
                    frames = [frames[0], frames[1], CORRUPT_PAYLOAD]
                    self.corrupted.append(seq)
                self._pub.send_multipart(frames)
                self.forwarded += 1
        finally:
            self._sub.close(linger=0)
            self._pub.close(linger=0)

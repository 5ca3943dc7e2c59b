"""EventStream edges on real loopback ZMQ sockets, without SGLang (fast).

An XPUB socket stands in for a publisher started without `replay_endpoint` (SGLang's
KVEventsConfig default); XPUB reports the subscription, so the test knows when the stream
is listening. Frames follow ZmqEventPublisher: [topic, seq (8 bytes big-endian), msgpack].
The SGLang-published cases are in tests/integration/test_remote_events.py.
"""

from __future__ import annotations

import msgpack
import pytest
import zmq

from engine_adapter.remote.event_stream import EventStream
from engine_adapter.remote.remote_engine import RemoteEngine
from kvctl.errors import InputError

pytestmark = pytest.mark.unit


@pytest.fixture
def publisher():
    context = zmq.Context()
    xpub = context.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    xpub.bind("tcp://127.0.0.1:*")
    yield xpub
    xpub.close(linger=0)
    context.term()


def batch(seq, events):
    return [b"", seq.to_bytes(8, "big"), msgpack.packb([1.0, events, 0])]


def stored(block_hash, parent=None):
    return {
        "type": "BlockStored",
        "block_hashes": [block_hash],
        "parent_block_hash": parent,
        "token_ids": [1, 2, 3, 4],
        "block_size": 4,
        "lora_id": None,
        "medium": "GPU",
    }


def attach(publisher) -> EventStream:
    stream = EventStream(publisher.getsockopt_string(zmq.LAST_ENDPOINT)).start()
    assert publisher.poll(10_000), "the stream never subscribed"
    publisher.recv()  # the subscription message
    return stream


def test_late_attach_without_replay_counts_lost_batches(publisher):
    """No replay socket and the first batch seen is seq 3: batches 0-2 are lost and the
    mirror is marked incomplete."""
    stream = attach(publisher)
    try:
        publisher.send_multipart(batch(3, [stored(11)]))
        assert stream.wait_until(lambda s: s.next_seq == 4, timeout=10)
        stats = stream.stats()
        assert (stats.batches_lost, stats.gaps_detected, stats.gaps_filled) == (3, 1, 0)
        assert stats.mirror_complete is False
    finally:
        stream.close()


def test_all_blocks_cleared_makes_the_mirror_exact_again(publisher):
    """After losses, an AllBlocksCleared batch restores mirror_complete."""
    stream = attach(publisher)
    try:
        publisher.send_multipart(batch(5, [stored(11)]))
        publisher.send_multipart(batch(6, [{"type": "AllBlocksCleared"}, stored(12)]))
        assert stream.wait_until(lambda s: s.next_seq == 7, timeout=10)
        assert stream.stats().mirror_complete and stream.hashes() == frozenset({12})
    finally:
        stream.close()


def test_sequence_going_backwards_is_a_publisher_restart(publisher):
    """Live seq 0 after live seq 1: a new publisher; the mirror is cleared and rebuilt."""
    stream = attach(publisher)
    try:
        publisher.send_multipart(batch(0, [stored(11)]))
        publisher.send_multipart(batch(1, [stored(12, parent=11)]))
        publisher.send_multipart(batch(0, [stored(21)]))
        assert stream.wait_until(lambda s: s.publisher_restarts == 1 and s.next_seq == 1, 10)
        assert stream.hashes() == frozenset({21})
    finally:
        stream.close()


def test_bad_endpoint_stops_the_thread_with_a_reason():
    """An endpoint ZMQ cannot parse ends the thread; the reason is in the stats."""
    stream = EventStream("tcp://no such host:x").start()
    try:
        assert stream.wait_until(lambda s: not s.running, timeout=10)
        assert stream.stats().failure.startswith("ZMQError")
    finally:
        stream.close()


def test_engine_rejects_non_tcp_event_endpoint():
    """--kv-events must be tcp:// (or ipc://): anything else is bad input."""
    with pytest.raises(InputError, match="--kv-events"):
        RemoteEngine("http://127.0.0.1:1", kv_events="localhost:5557")

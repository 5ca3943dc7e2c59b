"""The KV-event mirror against SGLang's own publisher and cache, on loopback.

A real UnifiedRadixCache (Rust tree core, CPU) publishes through SGLang's own
ZmqEventPublisher (tests/support/loopback.py). The oracle for "the mirror equals
the tree" is independent of the events: for every prompt ever inserted, the tree's own
match_prefix gives the resident prefix, and SGLang's own get_hash_str hashes its pages.
Faults go through a real ZMQ relay (fault_relay.py) that drops or corrupts messages; the
replay ROUTER is always SGLang's.
"""

from __future__ import annotations

import random
import time

import pytest

from engine_adapter.remote.event_stream import EventStream
from support.fault_relay import FaultRelay
from remote_support import PAGE, TINY, prompt
from engine_adapter.remote.routing import namespace_seed, namespaced, page_hashes

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(loopback_cls):
    srv = loopback_cls(page_size=PAGE, pool_tokens=256, model_dir=TINY, metrics=False)
    yield srv
    srv.close()


@pytest.fixture
def idle(server):
    """Each test starts from an empty, idle cache."""
    server.release_all()
    server.flush()
    return server


def open_stream(endpoint, server, **options):
    options.setdefault("resync_interval_s", 0.2)
    stream = EventStream(endpoint, replay_endpoint=server.replay_endpoint, **options).start()
    assert stream.wait_until(lambda s: s.seeded, timeout=10)
    return stream


def caught_up(stream, server, timeout=10.0) -> bool:
    return stream.wait_until(lambda s: s.next_seq >= server.batches_published, timeout=timeout)


@pytest.fixture
def stream(idle):
    s = open_stream(idle.kv_endpoint, idle)
    yield s
    s.close()


def warm(server, stream, relay=None):
    """Publish until a live message has crossed the (relayed) SUB path and all is applied."""
    for _ in range(50):
        server.serve(prompt(PAGE))
        if stream.stats().live_messages > 0 and (relay is None or relay.forwarded > 0):
            break
        time.sleep(0.05)
    assert caught_up(stream, server)


def test_mirror_equals_tree_after_inserts(idle, stream):
    """Three prompts sharing a system prompt: the mirror holds exactly the tree's pages."""
    system = prompt(3 * PAGE)
    for _ in range(3):
        idle.serve(prompt(2 * PAGE, prefix=system))
    assert caught_up(stream, idle)
    assert stream.hashes() == idle.resident_block_hashes() and len(stream.hashes()) == 9
    stream.check_integrity()


def test_mirror_equals_tree_after_eviction(idle, stream):
    """SGLang evicts whole leaf nodes: asking for 8 tokens frees the LRU leaf's 12; the
    mirror drops the same three pages."""
    for _ in range(3):
        idle.serve(prompt(3 * PAGE))
    assert idle.evict(2 * PAGE) == 3 * PAGE
    assert caught_up(stream, idle)
    assert stream.hashes() == idle.resident_block_hashes() and len(stream.hashes()) == 6
    stream.check_integrity()


def test_mirror_is_empty_after_flush(idle, stream):
    """AllBlocksCleared from a flush empties the mirror, like the tree."""
    idle.serve(prompt(4 * PAGE))
    idle.flush()
    assert caught_up(stream, idle)
    assert stream.hashes() == idle.resident_block_hashes() == frozenset()


def test_salted_prompts_mirror_and_hash_like_sglang(idle, stream):
    """cache_salt namespaces the chain: the mirror equals the tree, and kvctl's prompt
    hashes for the salted prompt are the published ones."""
    tokens = prompt(3 * PAGE)
    idle.serve(tokens, cache_salt="tenant-a")
    idle.serve(tokens)
    assert caught_up(stream, idle)
    assert stream.hashes() == idle.resident_block_hashes()
    assert stream.match(page_hashes(tokens, PAGE, cache_salt="tenant-a")).tokens == 3 * PAGE


def test_prompt_hashes_equal_sglang_get_hash_str(loopback_cls):
    """kvctl's page hash chain equals SGLang's get_hash_str for page sizes 1, 4, 16."""
    from sglang.srt.mem_cache.utils import get_hash_str, hash_str_to_int64

    rng = random.Random(3)
    for page in (1, 4, 16):
        tokens = [rng.randrange(0, 150_000) for _ in range(5 * page)]
        theirs = tuple(hash_str_to_int64(h) for h in get_hash_str(tokens, None, page_size=page))
        assert page_hashes(tokens, page) == theirs


def test_namespace_hashing_equals_sglang(loopback_cls):
    """The dynamo namespace seed and block re-hash equal kv_events' own functions."""
    from sglang.srt.disaggregation.kv_events import kv_event_namespace_seed, namespaced_block_hash

    for extra_key, salt in (("lora-x", None), (None, "s"), ("a", "bc"), ("ab", "c")):
        ours = namespace_seed(extra_key=extra_key, cache_salt=salt)
        assert ours == kv_event_namespace_seed(extra_key=extra_key, cache_salt=salt)
        assert namespaced(-42, ours) == namespaced_block_hash(-42, namespace_seed=ours)


def test_dropped_message_is_filled_from_replay(idle):
    """The relay drops one live batch; the stream sees the gap, replays it from SGLang's
    ROUTER and ends equal to the tree."""
    relay = FaultRelay(idle.kv_endpoint)
    stream = open_stream(relay.endpoint, idle, resync_interval_s=60.0)
    try:
        warm(idle, stream, relay)
        before = stream.stats()
        relay.drop.add(idle.batches_published)
        idle.serve(prompt(2 * PAGE))
        idle.serve(prompt(2 * PAGE))
        # The gap is counted as filled right after its replay, a moment after next_seq moves.
        assert stream.wait_until(lambda s: s.gaps_filled > before.gaps_filled, timeout=10)
        assert caught_up(stream, idle)
        after = stream.stats()
        assert len(relay.dropped) == 1
        assert (
            after.gaps_detected - before.gaps_detected,
            after.gaps_filled - before.gaps_filled,
        ) == (1, 1)
        assert after.mirror_complete and stream.hashes() == idle.resident_block_hashes()
    finally:
        stream.close()
        relay.close()


def test_corrupted_payload_is_counted_and_recovered(idle):
    """A live batch whose payload is not msgpack is counted as malformed, then fetched
    intact from the replay socket: nothing is lost."""
    relay = FaultRelay(idle.kv_endpoint)
    stream = open_stream(relay.endpoint, idle, resync_interval_s=60.0)
    try:
        warm(idle, stream, relay)
        before = stream.stats()
        relay.corrupt.add(idle.batches_published)
        idle.serve(prompt(2 * PAGE))
        assert caught_up(stream, idle)
        after = stream.stats()
        assert (after.malformed_messages - before.malformed_messages, after.batches_lost) == (1, 0)
        assert stream.hashes() == idle.resident_block_hashes()
    finally:
        stream.close()
        relay.close()


def test_garbage_frames_are_counted_and_skipped(idle):
    """A one-frame message is malformed: counted, skipped, the mirror unharmed."""
    relay = FaultRelay(idle.kv_endpoint)
    stream = open_stream(relay.endpoint, idle, resync_interval_s=60.0)
    try:
        warm(idle, stream, relay)
        before = stream.stats()
        relay.inject([b"not a kv event"])
        counted = before.malformed_messages + 1
        assert stream.wait_until(lambda s: s.malformed_messages >= counted, timeout=10)
        idle.serve(prompt(2 * PAGE))
        assert caught_up(stream, idle)
        assert stream.stats().malformed_messages == counted
        assert stream.stats().last_malformed == "live message has 1 frames, expected 3"
        assert stream.hashes() == idle.resident_block_hashes()
    finally:
        stream.close()
        relay.close()


def test_publisher_restart_is_detected_and_mirror_rebuilt(idle, stream):
    """The server restarts (new publisher, sequence from 0, empty cache): the stream sees
    numbers go backwards, clears the mirror and rebuilds it from the new publisher."""
    for _ in range(10):
        idle.serve(prompt(PAGE))
    assert caught_up(stream, idle)
    idle.restart()
    for _ in range(5):
        idle.serve(prompt(2 * PAGE))
        if stream.wait_until(lambda s: s.publisher_restarts >= 1, timeout=0.5):
            break
    assert stream.stats().publisher_restarts == 1
    assert caught_up(stream, idle)
    assert stream.hashes() == idle.resident_block_hashes()


def test_late_attach_after_buffer_rollover_is_incomplete_until_clear(loopback_cls):
    """Attaching after the replay buffer (2 batches) rolled over: 3 of 5 batches are lost
    and the mirror is marked incomplete; the next flush makes it exact again."""
    srv = loopback_cls(
        page_size=PAGE, pool_tokens=256, model_dir=TINY, metrics=False, buffer_steps=2
    )
    try:
        srv.flush()  # seq 0 is the cache's initial AllBlocksCleared; this is seq 1
        for _ in range(3):
            srv.serve(prompt(PAGE))
        assert srv.wait_published()  # the buffer has rolled over before the stream attaches
        stream = open_stream(srv.kv_endpoint, srv)
        try:
            assert caught_up(stream, srv)
            assert (stream.stats().batches_lost, stream.stats().mirror_complete) == (3, False)
            srv.flush()
            srv.serve(prompt(PAGE))
            assert caught_up(stream, srv)
            assert stream.stats().mirror_complete
            assert stream.hashes() == srv.resident_block_hashes()
        finally:
            stream.close()
    finally:
        srv.close()


def test_dynamo_format_hashes_are_routable(loopback_cls):
    """With format "dynamo" the published hashes are namespaced by the salt; kvctl's
    dynamo hashing of the prompt finds them."""
    srv = loopback_cls(
        page_size=PAGE, pool_tokens=256, model_dir=TINY, metrics=False, event_format="dynamo"
    )
    try:
        stream = open_stream(srv.kv_endpoint, srv)
        try:
            tokens = prompt(3 * PAGE)
            srv.serve(tokens, cache_salt="tenant-b")
            assert caught_up(stream, srv)
            ours = page_hashes(tokens, PAGE, cache_salt="tenant-b", dynamo_format=True)
            assert stream.hashes() == frozenset(ours)
        finally:
            stream.close()
    finally:
        srv.close()

"""kvctl's embedded engine as a KV-event source: SGLang's ZmqEventPublisher carries the
events its real UnifiedRadixCache records, and the remote mirror follows its tree.

`make_engine` (tests/conftest.py) builds an EmbeddedEngine; its `take_kv_events()` drains
SGLang's own recorder. Oracle: the engine's own snapshot (tree tokens on device, and the
ledger's evictable + protected tokens).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_adapter.remote.event_stream import EventStream

pytestmark = pytest.mark.integration

PAGE = 16


class Feed:
    """Publishes the engine's KV events after each step, like SGLang's scheduler does."""

    def __init__(self, engine):
        from sglang.srt.disaggregation.kv_events import ZmqEventPublisher

        self.engine, self.published = engine, 0
        self.publisher = ZmqEventPublisher(
            attn_dp_rank=0, endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*"
        )
        source = self.publisher.describe_local_source(PAGE)
        self.stream = EventStream(
            source["endpoint"], replay_endpoint=source["replay_endpoint"], resync_interval_s=0.2
        ).start()
        assert self.stream.wait_until(lambda s: s.seeded, timeout=10)

    def pump(self) -> None:
        from sglang.srt.disaggregation.kv_events import KVEventBatch

        events = self.engine.take_kv_events()
        if events:
            self.publisher.publish(KVEventBatch(ts=time.time(), events=events))
            self.published += 1

    def run(self) -> None:
        while self.engine.has_work():
            self.engine.step()
            self.pump()
        self.pump()
        assert self.stream.wait_until(lambda s: s.next_seq >= self.published, timeout=10)

    def close(self) -> None:
        self.stream.close()
        self.publisher.shutdown()


@pytest.fixture
def feed(make_engine):
    f = Feed(make_engine(enable_kv_events=True))
    yield f
    f.close()


def submit_family(engine, count: int) -> None:
    """`count` requests sharing a 64-token system prompt, each with its own 40-token tail."""
    from engine_adapter.embedded.requests import RequestSpec

    system = np.arange(1, 65, dtype=np.int64)
    for i in range(count):
        tail = np.arange(1_000 * (i + 1), 1_000 * (i + 1) + 40, dtype=np.int64)
        engine.submit(RequestSpec(rid=f"r{i}", tokens=np.concatenate([system, tail]),
                                  max_new_tokens=4))  # fmt: skip


def test_mirror_follows_the_embedded_engine_tree(feed):
    """After a shared-prefix family finishes, the mirror's device tokens equal the engine's
    tree tokens, which equal its ledger's evictable + protected tokens."""
    submit_family(feed.engine, 4)
    feed.run()
    snap = feed.engine.snapshot()
    mirrored = feed.stream.read()[1].tokens("GPU")
    assert mirrored == snap.tree.cached_tokens > 0
    assert mirrored == snap.ledger.evictable_tokens + snap.ledger.protected_tokens
    feed.stream.check_integrity()


def test_mirror_sees_the_shared_system_prompt(feed):
    """Four requests branch off the same 64-token system prompt (4 pages of 16)."""
    submit_family(feed.engine, 4)
    feed.run()
    shape = feed.stream.read()[1]
    assert (shape.max_shared_prefix_tokens, shape.max_fan_out) == (64, 4)


def test_mirror_empties_when_the_engine_flushes(feed):
    """flush_cache evicts every unlocked prefix; BlockRemoved events empty the mirror."""
    submit_family(feed.engine, 2)
    feed.run()
    feed.engine.flush_cache()
    feed.pump()
    assert feed.stream.wait_until(lambda s: s.next_seq >= feed.published, timeout=10)
    assert feed.stream.hashes() == frozenset() and feed.engine.snapshot().tree.cached_tokens == 0

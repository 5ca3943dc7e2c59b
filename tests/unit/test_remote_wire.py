"""Decoding SGLang's KV-event wire format (engine_adapter/remote/wire.py).

Payloads are built as `kv_events.ZmqEventPublisher` encodes them (msgspec: the batch is the
array [ts, events, attn_dp_rank], each event a map tagged by "type", None fields omitted);
tests/integration/test_remote_events.py decodes the real publisher's bytes.
"""

from __future__ import annotations

import msgpack
import pytest

from engine_adapter.remote.wire import (
    AllCleared,
    MalformedMessage,
    RemovedBlocks,
    StoredBlocks,
    decode_live,
    decode_payload,
)

pytestmark = pytest.mark.unit


def _frames(events, seq=7, ts=1.5, rank=0):
    payload = msgpack.packb([ts, events, rank])
    return [b"", seq.to_bytes(8, "big"), payload]


def test_coalesced_store_decodes_hashes_parent_and_tokens_per_block():
    """A coalesced BlockStored of 3 pages of 4 tokens gives 3 hashes with 4 tokens each."""
    event = {
        "type": "BlockStored",
        "block_hashes": [11, 12, 13],
        "parent_block_hash": 5,
        "token_ids": list(range(12)),
        "block_size": 4,
        "lora_id": None,
        "medium": "GPU",
    }
    batch = decode_live(_frames([event]))
    assert batch.seq == 7
    assert batch.events == (
        StoredBlocks(
            block_hashes=(11, 12, 13), parent_block_hash=5, block_tokens=(4, 4, 4), medium="GPU"
        ),
    )


def test_missing_medium_means_gpu():
    """SGLang's recorder substitutes StorageMedium.GPU for a None medium; omitted means GPU."""
    event = {"type": "BlockRemoved", "block_hashes": [11]}
    assert decode_live(_frames([event])).events == (
        RemovedBlocks(block_hashes=(11,), medium="GPU"),
    )


def test_salt_and_lora_name_are_kept():
    """cache_salt and lora_name (dynamo format) survive decoding."""
    event = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": [1, 2],
        "block_size": 2,
        "lora_id": None,
        "medium": "CPU_PINNED",
        "cache_salt": "tenant-a",
        "lora_name": "adapter",
    }
    stored = decode_live(_frames([event])).events[0]
    assert (stored.cache_salt, stored.lora_name, stored.medium) == (
        "tenant-a",
        "adapter",
        "CPU_PINNED",
    )


def test_positional_event_encoding_is_accepted():
    """vLLM's array-like events ([tag, fields...]) decode to the same records."""
    events = [["BlockStored", [9], None, [1, 2, 3, 4], 4, None, "GPU"], ["AllBlocksCleared"]]
    batch = decode_live(_frames(events))
    assert batch.events == (
        StoredBlocks(block_hashes=(9,), parent_block_hash=None, block_tokens=(4,), medium="GPU"),
        AllCleared(),
    )


def test_unknown_event_type_is_counted_not_fatal():
    """An event type kvctl does not know is skipped and counted in unknown_events."""
    batch = decode_live(_frames([{"type": "BlockPinned"}, {"type": "AllBlocksCleared"}]))
    assert (batch.unknown_events, batch.events) == (1, (AllCleared(),))


def test_wrong_frame_count_is_malformed_without_seq():
    """Two frames are not a KV-event message; no sequence number can be trusted."""
    with pytest.raises(MalformedMessage) as info:
        decode_live([b"", b"\x00" * 8])
    assert info.value.seq is None


def test_short_seq_frame_is_malformed():
    """The sequence frame must be exactly 8 bytes."""
    with pytest.raises(MalformedMessage, match="8"):
        decode_live([b"", b"\x01", msgpack.packb([0.0, [], 0])])


def test_garbage_payload_is_malformed_with_its_seq():
    """Bytes that are not msgpack raise, carrying the readable sequence number."""
    with pytest.raises(MalformedMessage) as info:
        decode_payload(b"\xc1\xc1", seq=42)
    assert info.value.seq == 42


def test_non_positive_block_size_is_malformed():
    """block_size 0 cannot describe a page."""
    event = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": [],
        "block_size": 0,
        "lora_id": None,
    }
    with pytest.raises(MalformedMessage, match="block_size"):
        decode_live(_frames([event]))


def test_more_tokens_than_blocks_is_malformed():
    """token_ids longer than block_hashes x block_size cannot be split into pages."""
    event = {
        "type": "BlockStored",
        "block_hashes": [1],
        "parent_block_hash": None,
        "token_ids": [1, 2, 3],
        "block_size": 2,
        "lora_id": None,
    }
    with pytest.raises(MalformedMessage, match="token_ids"):
        decode_live(_frames([event]))


def test_batch_without_events_list_is_malformed():
    """The payload must be [ts, events, attn_dp_rank]."""
    with pytest.raises(MalformedMessage, match="batch"):
        decode_payload(msgpack.packb({"ts": 1.0}), seq=0)

"""Decode SGLang's KV-event wire format into small frozen records.

The format is the one `sglang/srt/disaggregation/kv_events.py` (0.5.23) writes:

::

    live PUB message     [topic, seq (8 bytes, big-endian, unsigned), payload]
    replay ROUTER reply  [b"", topic, seq, payload]        ... then [b"", b"", -1 (8 bytes), b""]
    payload              msgpack array  [ts, events, attn_dp_rank]
    event                msgpack map tagged by "type":
                           BlockStored    block_hashes, parent_block_hash, token_ids, block_size,
                                          lora_id, medium?, cache_salt?, session_id?, lora_name?
                           BlockRemoved   block_hashes, medium?
                           AllBlocksCleared

Optional fields left at None are omitted on the wire (msgspec `omit_defaults`). A missing
`medium` means GPU: SGLang's `KVCacheEventRecorder.record_store/record_remove` substitute
`StorageMedium.GPU` for None before enqueueing. The positional (array) encoding that vLLM
uses for the same events, `[tag, field, ...]`, is accepted too; the "dynamo" format differs
from "default" only in the hash values (namespaced) and `lora_name`, so both decode here.

Nothing here keeps token ids: a stored block is reduced to its hash, parent and token count.
Pure: no sockets, no threads. `decode_*` raise `MalformedMessage` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

GPU = "GPU"
MEDIA = ("GPU", "CPU_PINNED", "DISK", "EXTERNAL")
END_OF_REPLAY = b"\xff" * 8  # ZmqEventPublisher.END_SEQ: (-1).to_bytes(8, "big", signed=True)

_STORED_POSITIONAL = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "cache_salt",
    "session_id",
    "lora_name",
)
_REMOVED_POSITIONAL = ("block_hashes", "medium")


class MalformedMessage(ValueError):
    """A frame set or payload that is not SGLang's KV-event format; `seq` when it was readable."""

    def __init__(self, reason: str, *, seq: int | None = None) -> None:
        super().__init__(reason)
        self.seq = seq


@dataclass(frozen=True, kw_only=True)
class StoredBlocks:
    """A chain of pages stored under one parent: block i's parent is block i-1."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    block_tokens: tuple[int, ...]  # tokens per block (page_size for full pages)
    medium: str
    cache_salt: str | None = None
    lora_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class RemovedBlocks:
    block_hashes: tuple[int, ...]
    medium: str


@dataclass(frozen=True, kw_only=True)
class AllCleared:
    """The publisher's cache dropped every block (a flush or a cache reset)."""


KvEvent = StoredBlocks | RemovedBlocks | AllCleared


@dataclass(frozen=True, kw_only=True)
class EventBatch:
    seq: int
    ts: float
    events: tuple[KvEvent, ...]
    attn_dp_rank: int | None
    unknown_events: int = 0  # tagged events of a type kvctl does not know (skipped)


def decode_seq(raw: bytes) -> int:
    """The 8-byte big-endian sequence number; raises MalformedMessage otherwise."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != 8:
        raise MalformedMessage(f"sequence frame has {len(raw)} bytes, expected 8")
    return int.from_bytes(raw, "big")


def decode_live(frames: list[bytes]) -> EventBatch:
    """Decode one PUB message `[topic, seq, payload]`."""
    if len(frames) != 3:
        raise MalformedMessage(f"live message has {len(frames)} frames, expected 3")
    seq = decode_seq(frames[1])
    return decode_payload(frames[2], seq=seq)


def decode_payload(payload: bytes, *, seq: int) -> EventBatch:
    """Decode a msgpack `[ts, events, attn_dp_rank]` batch carrying sequence `seq`."""
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as err:  # msgpack raises several unrelated types
        raise MalformedMessage(f"payload is not msgpack ({type(err).__name__})", seq=seq) from None
    if not isinstance(batch, (list, tuple)) or len(batch) not in (2, 3):
        raise MalformedMessage("batch is not [ts, events, attn_dp_rank]", seq=seq)
    ts, raw_events = batch[0], batch[1]
    rank = batch[2] if len(batch) == 3 else None
    if not isinstance(ts, (int, float)) or not isinstance(raw_events, (list, tuple)):
        raise MalformedMessage("batch ts or events has the wrong type", seq=seq)
    if rank is not None and not isinstance(rank, int):
        raise MalformedMessage("attn_dp_rank is not an int", seq=seq)
    events: list[KvEvent] = []
    unknown = 0
    for raw in raw_events:
        event = _decode_event(raw, seq)
        if event is None:
            unknown += 1
        else:
            events.append(event)
    return EventBatch(
        seq=seq, ts=float(ts), events=tuple(events), attn_dp_rank=rank, unknown_events=unknown
    )


def _decode_event(raw: Any, seq: int) -> KvEvent | None:
    fields = _as_fields(raw, seq)
    kind = fields.get("type")
    if kind == "BlockStored":
        return _stored(fields, seq)
    if kind == "BlockRemoved":
        return RemovedBlocks(
            block_hashes=_hashes(fields.get("block_hashes"), seq),
            medium=_medium(fields.get("medium"), seq),
        )
    if kind == "AllBlocksCleared":
        return AllCleared()
    return None


def _as_fields(raw: Any, seq: int) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], str):
        names = {"BlockStored": _STORED_POSITIONAL, "BlockRemoved": _REMOVED_POSITIONAL}
        fields = dict(zip(names.get(raw[0], ()), raw[1:], strict=False))
        fields["type"] = raw[0]
        return fields
    raise MalformedMessage("event is neither a tagged map nor a tagged array", seq=seq)


def _stored(fields: dict[str, Any], seq: int) -> StoredBlocks:
    hashes = _hashes(fields.get("block_hashes"), seq)
    parent = fields.get("parent_block_hash")
    if parent is not None and not _is_int(parent):
        raise MalformedMessage("parent_block_hash is not an int", seq=seq)
    block_size = fields.get("block_size")
    if not _is_int(block_size) or block_size <= 0:
        raise MalformedMessage(f"block_size {block_size!r} is not a positive int", seq=seq)
    token_ids = fields.get("token_ids") or []
    if not isinstance(token_ids, (list, tuple)):
        raise MalformedMessage("token_ids is not a list", seq=seq)
    if token_ids and len(token_ids) > len(hashes) * block_size:
        raise MalformedMessage("more token_ids than block_hashes x block_size", seq=seq)
    if token_ids:
        # Coalesced chains share one block_size; only the last block may be short.
        counts = [len(token_ids[i * block_size : (i + 1) * block_size]) for i in range(len(hashes))]
        if 0 in counts:
            raise MalformedMessage("a stored block carries no tokens", seq=seq)
    else:
        counts = [block_size] * len(hashes)
    salt, lora_name = fields.get("cache_salt"), fields.get("lora_name")
    return StoredBlocks(
        block_hashes=hashes,
        parent_block_hash=parent,
        block_tokens=tuple(counts),
        medium=_medium(fields.get("medium"), seq),
        cache_salt=salt if isinstance(salt, str) else None,
        lora_name=lora_name if isinstance(lora_name, str) else None,
    )


def _hashes(raw: Any, seq: int) -> tuple[int, ...]:
    if not isinstance(raw, (list, tuple)) or not raw:
        raise MalformedMessage("block_hashes is not a non-empty list", seq=seq)
    if not all(_is_int(h) for h in raw):
        raise MalformedMessage("a block hash is not an int", seq=seq)
    return tuple(raw)


def _medium(raw: Any, seq: int) -> str:
    if raw is None:
        return GPU
    if not isinstance(raw, str) or not raw:
        raise MalformedMessage(f"medium {raw!r} is not a string", seq=seq)
    return raw


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

"""`GET /records?ack=N&limit=M`: the recording stream, as a pure function of the tap.

The plugin's HTTP server calls `records_response(tap, query)` for that path and sends the
status and JSON body it returns; nothing here touches sockets. The body:

    {"schema_version": 1, "recording_id": "9f..", "block_tokens": 512,
     "dropped": 0, "in_flight": 3, "errors": 0,
     "records": [{"seq": 7, "arrival_seq": 6, "arrival_s": 1234.5, "input_length": 1100,
                  "output_length": 40, "blocks": ["a1b2c3d4e5f60718", ...]}, ...],
     "next_ack": 7}

`ack` releases every record with `seq <= ack` (the reader has stored them); `next_ack` is
what the reader sends next, with `recording=<recording_id>` of the body it acknowledges: an
ack meant for an earlier recording (the server restarted) releases nothing.
`blocks` are the salted chained digests (block_hasher.py), hex:
they reveal only which blocks are equal within this recording, never a token id. A changed
`recording_id` means the server restarted (sequence numbers start again at 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RECORDS_SCHEMA_VERSION = 1
MAX_LIMIT = 4096
OFF_MESSAGE = "recording is off: start the server with KVCTL_RECORD=1"


def records_response(tap: Any, query: Mapping[str, str]) -> tuple[int, dict]:
    """(HTTP status, JSON body) for one poll. `tap` is a RecordingTap or None (the plugin
    built none). 404 while recording is off, 400 for a bad `ack` / `limit`."""
    if tap is None:
        return 404, {"error": OFF_MESSAGE}
    if not tap.enabled:
        return 404, {"error": tap.disabled_reason or OFF_MESSAGE}
    try:
        ack = _integer(query, "ack", default=0, low=0)
        limit = min(_integer(query, "limit", default=MAX_LIMIT, low=1), MAX_LIMIT)
    except ValueError as err:
        return 400, {"error": str(err)}
    if _one(query, "recording") not in (None, "", tap.recording_id):
        ack = 0  # that ack counted another recording's sequence numbers
    batch = tap.read(ack=ack, limit=limit)
    records = [{"seq": r.seq, "arrival_seq": r.arrival_seq, "arrival_s": r.arrival_s,
                "input_length": r.input_length,
                "output_length": r.output_length, "blocks": [b.hex() for b in r.blocks]}
               for r in batch.records]
    return 200, {
        "schema_version": RECORDS_SCHEMA_VERSION,
        "recording_id": tap.recording_id,
        "block_tokens": batch.block_tokens,
        "dropped": batch.dropped,
        "in_flight": batch.in_flight,
        "errors": tap.errors,
        "records": records,
        "next_ack": records[-1]["seq"] if records else ack,
    }


def _one(query: Mapping[str, Any], name: str) -> str | None:
    """One query value; the last of a parse_qs-style list."""
    raw = query.get(name)
    if isinstance(raw, (list, tuple)):
        raw = raw[-1] if raw else None
    return None if raw is None else str(raw)


def _integer(query: Mapping[str, Any], name: str, *, default: int, low: int) -> int:
    raw = _one(query, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value

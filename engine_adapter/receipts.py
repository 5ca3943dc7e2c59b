"""Receipts: small frozen records of what the engine did, for spans and logs.

A receipt never carries token ids, prompt text or unsalted cache keys (seed 000 0x0CE);
the namespace is the hashed or allow-listed label the request was admitted under.
"""

from __future__ import annotations

from dataclasses import dataclass

RECEIPT_KINDS = ("match", "allocation", "eviction", "offload", "reload", "retraction")


@dataclass(frozen=True, kw_only=True)
class Receipt:
    """One engine action.

    kind: one of RECEIPT_KINDS. start_s/end_s: virtual clock seconds (end > start for
    modeled transfers). tokens: tokens the action concerned (matched, allocated, evicted,
    moved). nbytes: bytes moved (offload/reload), else 0. outcome: "ok", "hit", "miss",
    "rejected:<reason>", "failed". namespace: hashed label. request: the request id (an opaque
    kvctl id, not user data), or "" for engine-wide actions such as an eviction.
    """

    kind: str
    start_s: float
    end_s: float
    tokens: int
    nbytes: int = 0
    outcome: str = "ok"
    namespace: str = ""
    request: str = ""

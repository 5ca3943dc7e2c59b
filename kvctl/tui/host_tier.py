"""SGLang HiCache's host tier as rows of (label, value) text, shared by `kvctl inspect` and
`kvctl monitor`. Pure: reads a Snapshot, formats numbers; a dash where not observable.

    host pool (HiCache L2)            2,052 slots, write_through
    free / evictable / protected      1,252 / 800 / 0
    residual (host slots in no node)  0 ok
    written / loaded tokens           1,600 / 784 (pending writes 0, loads 0)
    hit tokens device / host / L3     12 / 784 / -

No rows at all when the snapshot has no host tier (a server without HiCache).
"""

from __future__ import annotations

from typing import Any

from engine_adapter.hicache_state import HostLedger
from engine_adapter.snapshot import Snapshot
from kvctl.tui.format import DASH


def _n(value: int | None) -> str:
    return DASH if value is None else f"{value:,}"


def residual_verdict(host: HostLedger) -> str:
    residual = host.residual_tokens
    if residual is None:
        return f"{DASH} (needs a per-node read)"
    verdict = "ok" if residual == 0 else "leak!" if residual > 0 else "double count!"
    return f"{residual:,} {verdict}"


def host_tier_rows(snapshot: Snapshot) -> list[tuple[str, str]]:
    host, io = snapshot.ledger.host, snapshot.hicache
    rows: list[tuple[str, str]] = []
    if host is not None:
        rows += [
            ("host pool (HiCache L2)", f"{host.capacity_tokens:,} slots, {host.write_policy}"),
            ("host free / evictable / protected",
             f"{host.free_tokens:,} / {_n(host.evictable_tokens)} / {_n(host.protected_tokens)}"),
            ("host residual (slots in no node)", residual_verdict(host)),
        ]  # fmt: skip
    if io is not None:
        rows += [
            ("host written / loaded tokens",
             f"{io.written_tokens:,} / {io.loaded_tokens:,} "
             f"(pending writes {io.pending_writes}, loads {io.pending_loads})"),
            ("hit tokens device / host / L3",
             f"{io.hit_tokens_device:,} / {io.hit_tokens_host:,} / {_n(io.hit_tokens_storage)}"),
        ]  # fmt: skip
    return rows


def host_tier_derived(snapshot: Snapshot) -> dict[str, Any] | None:
    """The host ledger's derived terms for `--json` (properties are not serialized)."""
    host = snapshot.ledger.host
    if host is None:
        return None
    return {"used_tokens": host.used_tokens, "evictable_tokens": host.evictable_tokens,
            "residual_tokens": host.residual_tokens, "usage": host.usage}

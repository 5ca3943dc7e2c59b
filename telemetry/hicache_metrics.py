"""kvctl's metric families for SGLang's hierarchical cache (HiCache), as rows that
`telemetry.metrics_table` turns into `MetricSpec`s (no import back into that table).

    kvctl_hicache_host_capacity_tokens        gauge    host pool slots (HiCache L2)
    kvctl_hicache_host_tokens{state}          gauge    free, evictable, protected (host ledger)
    kvctl_hicache_host_used_tokens            gauge    capacity - free (SGLang's host gauge)
    kvctl_hicache_host_residual_tokens        gauge    host slots held by no tree node (a leak > 0)
    kvctl_hicache_written_tokens_total        counter  device -> host backups acked
    kvctl_hicache_loaded_tokens_total         counter  host -> device load-backs acked
    kvctl_hicache_written_bytes_total / kvctl_hicache_loaded_bytes_total
    kvctl_hicache_pending_transfers{direction} gauge   write / load issued, not acked
    kvctl_hicache_hit_tokens_total{tier}      counter  prompt tokens served per tier (device,
                                                       host, storage), cached_tokens_details'

A server without HiCache has no samples in any of these (the snapshot's host tier is None);
a term not observable in a sample (evictable / protected / residual between per-node reads,
storage without an L3 backend) is left out, never exported as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from engine_adapter.snapshot import Snapshot

HOST_STATES: tuple[str, ...] = ("free", "evictable", "protected")
DIRECTIONS: tuple[str, ...] = ("write", "load")
TIERS: tuple[str, ...] = ("device", "host", "storage")

Row = tuple[Any, ...]  # (values by label, value): metrics_table.Sample's shape


def _host(value_of: Callable[[Any], int | float | None]):
    def read(s: Snapshot) -> Iterable[Row]:
        host = s.ledger.host
        if host is None:
            return ()
        value = value_of(host)
        return (((), None if value is None else float(value)),)

    return read


def _io(value_of: Callable[[Any], int | None]):
    def read(s: Snapshot) -> Iterable[Row]:
        return () if s.hicache is None else (((), float(value_of(s.hicache))),)

    return read


def _host_states(s: Snapshot) -> Iterable[Row]:
    host = s.ledger.host
    if host is None:
        return ()
    values = (host.free_tokens, host.evictable_tokens, host.protected_tokens)
    return (((state,), v) for state, v in zip(HOST_STATES, values, strict=True))


def _pending(s: Snapshot) -> Iterable[Row]:
    io = s.hicache
    return () if io is None else ((("write",), io.pending_writes), (("load",), io.pending_loads))


def _tier_hits(s: Snapshot) -> Iterable[Row]:
    io = s.hicache
    if io is None:
        return ()
    values = (io.hit_tokens_device, io.hit_tokens_host, io.hit_tokens_storage)
    return (((tier,), v) for tier, v in zip(TIERS, values, strict=True))


# (name, kind, help, labels, reader)
HICACHE_ROWS: tuple[tuple[str, str, str, tuple[str, ...], Callable], ...] = (
    ("kvctl_hicache_host_capacity_tokens", "gauge",
     "SGLang HiCache host pool (L2) size in token slots.", (), _host(lambda h: h.capacity_tokens)),
    ("kvctl_hicache_host_tokens", "gauge",
     "HiCache host pool slots by ledger state: free, evictable, protected (pinned by a load-back).",
     ("state",), _host_states),
    ("kvctl_hicache_host_used_tokens", "gauge",
     "HiCache host slots in use: capacity - free (SGLang's sglang:hicache_host_used_tokens).",
     (), _host(lambda h: h.used_tokens)),
    ("kvctl_hicache_host_residual_tokens", "gauge",
     "HiCache host slots in use but held by no tree node; a leak when > 0.",
     (), _host(lambda h: h.residual_tokens)),
    ("kvctl_hicache_written_tokens_total", "counter",
     "Tokens copied device -> host by HiCache (write-through or write-back), acked.",
     (), _io(lambda io: io.written_tokens)),
    ("kvctl_hicache_loaded_tokens_total", "counter",
     "Tokens loaded back host -> device by HiCache on a host hit, acked.",
     (), _io(lambda io: io.loaded_tokens)),
    ("kvctl_hicache_written_bytes_total", "counter", "Bytes copied device -> host by HiCache.",
     (), _io(lambda io: io.written_bytes)),
    ("kvctl_hicache_loaded_bytes_total", "counter", "Bytes loaded back host -> device by HiCache.",
     (), _io(lambda io: io.loaded_bytes)),
    ("kvctl_hicache_pending_transfers", "gauge",
     "HiCache transfers issued and not yet acknowledged, by direction (write, load).",
     ("direction",), _pending),
    ("kvctl_hicache_hit_tokens_total", "counter",
     "Prompt tokens served from each cache tier (device, host, storage): SGLang's per-request "
     "cached_tokens_details, summed.", ("tier",), _tier_hits),
)

"""SGLang's hierarchical cache (HiCache) as kvctl reports it: the host tier's partition and
its transfers. Plain frozen dataclasses (part of `Snapshot`); no SGLang objects.

HiCache (`--enable-hierarchical-cache`) keeps a host-memory pool (L2) behind the device
radix tree: a node's KV is copied device -> host ("written", write-through on insert or
write-back on eviction) and copied back host -> device ("loaded") when a request hits a
node whose device copy was evicted. The host pool is a slot allocator of its own, so it
gets a ledger of its own, balanced like the device one (seed 000 0x0CF)::

    N_host = N_free + N_evictable + N_protected     (+ residual: a leak when > 0)
             host pool     tree host copies   tree host copies on the path of an
             available     not pinned         in-flight load-back (SGLang host-locks it)

`free` comes from the host pool's allocator; `tree_tokens` (= evictable + protected) from
the tree's nodes (`is_backuped`, a per-node read): two independent sources, so the residual
is a real check. A term kvctl could not read in this sample is None ("not observable");
`None` for the whole `PoolLedger.host` means the server has no host tier.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class HostLedger:
    """The HiCache host pool partition, in token slots (see module docstring)."""

    page_size: int
    capacity_tokens: int
    free_tokens: int
    tree_tokens: int | None  # host copies held by tree nodes; None between per-node reads
    protected_tokens: int | None  # of those, on paths pinned by in-flight load-backs
    write_policy: str  # SGLang's --hicache-write-policy

    @property
    def used_tokens(self) -> int:
        """What SGLang's `sglang:hicache_host_used_tokens` reports: capacity - available."""
        return self.capacity_tokens - self.free_tokens

    @property
    def evictable_tokens(self) -> int | None:
        if self.tree_tokens is None or self.protected_tokens is None:
            return None
        return self.tree_tokens - self.protected_tokens

    @property
    def residual_tokens(self) -> int | None:
        """Host slots allocated but held by no tree node (None: not observable now)."""
        if self.tree_tokens is None:
            return None
        return self.used_tokens - self.tree_tokens

    @property
    def usage(self) -> float:
        """used / capacity (host-pool pressure); 0.0 for an empty pool."""
        return self.used_tokens / self.capacity_tokens if self.capacity_tokens > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class HiCacheIO:
    """HiCache transfers and per-tier prefix hits since the observer attached.

    written / loaded: tokens (and bytes) of completed device->host backups and host->device
    load-backs, from SGLang's own acks (`HiCacheAck.num_tokens_by_pool`, `num_bytes`).
    pending_*: transfers issued and not yet acknowledged, at the moment of the read.
    hit_tokens_*: prompt tokens served from each tier, summed over admitted requests from
    SGLang's per-request `cached_tokens_device / _host / _storage` (the numbers behind
    `cached_tokens_details`); storage is None when the server has no L3 backend.
    """

    written_tokens: int
    loaded_tokens: int
    written_bytes: int
    loaded_bytes: int
    pending_writes: int
    pending_loads: int
    hit_tokens_device: int
    hit_tokens_host: int
    hit_tokens_storage: int | None

"""The pool ledger (seed 000 0x0CF): N_pool = N_free + N_evictable + N_protected + N_private.

free: the allocator's `available_size()`; evictable / protected: the tree's sizes;
private: token slots live requests hold outside the tree. SGLang's request record says
which part of a request's row the tree owns:

    row:  [0 ........ cache_protected_len) [cache_protected_len ..... kv_allocated_len) | pad
           owned by the tree (shared)        owned by the request (private)             ^ page end

so private slots = ceil_page(kv_allocated_len) - cache_protected_len (the tree owns whole
pages; a request's last page is allocated whole). Rows actually written are
kv_committed_len - cache_protected_len; the difference is tail waste (seed 000 0x02G).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engine_adapter.base.pages import page_ceil
from engine_adapter.snapshot import HostLedger, PoolLedger


def private_slots(req: Any, page_size: int) -> tuple[int, int]:
    """(allocated slots, written rows) a live SGLang `Req` holds outside the tree."""
    kv = req.kv
    if not kv.holds_kv:
        return 0, 0
    protected = kv.cache_protected_len
    allocated = page_ceil(kv.kv_allocated_len, page_size) - protected
    written = kv.kv_committed_len - protected
    return max(allocated, 0), max(written, 0)


def read_ledger(
    allocator: Any,
    tree_cache: Any,
    live_reqs: Iterable[Any],
    *,
    host_tokens: int | None = 0,
    host_capacity_tokens: int | None = None,
    host: HostLedger | None = None,
) -> PoolLedger:
    """One consistent read of the pool partition (single-threaded engine: no tearing)."""
    page = allocator.page_size
    private = written = 0
    for req in live_reqs:
        slots, rows = private_slots(req, page)
        private += slots
        written += rows
    protected = tree_cache.protected_size()
    return PoolLedger(
        page_size=page,
        pool_tokens=allocator.size,
        free_tokens=allocator.available_size(),
        evictable_tokens=tree_cache.evictable_size(),
        used_tokens=protected + private,
        protected_tokens=protected,
        private_tokens=private,
        private_filled_tokens=written,
        host_tokens=host_tokens,
        host_capacity_tokens=host_capacity_tokens,
        host=host,
    )

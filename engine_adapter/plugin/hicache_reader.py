"""Read SGLang's hierarchical cache (HiCache) from inside the scheduler, for the plugin.

SGLang 0.5.23 attaches HiCache to the `UnifiedRadixCache` (`init_hicache`): the cache then
has a `cache_controller` (`HybridCacheController`) and a host pool (`full_kv_pool_host`, the
object SGLang's own `_log_hicache_stats` reads). Without one there is no host tier and
`HiCacheReader.attach` returns None. What is read, and from where (all in the scheduler's
thread, between steps, never written)::

    host pool    capacity, free       host_pool.logical_size, host_pool.available_size()
    tree         host copies          is_backuped(node) over the per-node read's nodes
                 protected            nodes on the root paths of `ongoing_load_back`
                                      anchors (SGLang host-locks them while loading), via
                                      tree_core.collect_path_info; None with an L3 backend
                                      (storage prefetches host-lock too, unseen here)
    transfers    pending              len(ongoing_write_through), len(ongoing_load_back)
                 written / loaded     SGLang's own acks: `_log_write_ack_metrics(ack)` and
                                      the acks `loading_check` pops (instance probes that
                                      forward every call, like instrument/probes.py)
    requests     tier hits            Req.cached_tokens_device / _host / _storage, once per
                                      admitted request (the numbers of cached_tokens_details)

Host copies are only counted at a per-node read (they need the node list); between those
the tree terms are None rather than a stale number mixed into a fresh ledger.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from engine_adapter.hicache_state import HiCacheIO, HostLedger
from engine_adapter.snapshot import Snapshot
from engine_adapter.tree_nodes import TreeNodes


def host_pool_of(tree_cache: Any) -> Any | None:
    """SGLang's KV host pool, found as its metrics reporter finds it; None without HiCache."""
    if getattr(tree_cache, "cache_controller", None) is None:
        return None
    return (getattr(tree_cache, "token_to_kv_pool_host", None)
            or getattr(tree_cache, "full_kv_pool_host", None))


class HiCacheReader:
    """One scheduler's HiCache observer (see module docstring). Scheduler thread only."""

    @classmethod
    def attach(cls, tree_cache: Any, on_error: Callable[[Exception], None]) -> HiCacheReader | None:
        """A reader installed on `tree_cache`, or None when the cache has no host tier."""
        host_pool = host_pool_of(tree_cache)
        return None if host_pool is None else cls(tree_cache, host_pool, on_error)

    def __init__(self, tree_cache: Any, host_pool: Any,
                 on_error: Callable[[Exception], None]) -> None:
        self.cache = tree_cache
        self.host_pool = host_pool
        self.controller = tree_cache.cache_controller
        self.anchor = self.controller.mem_pool_host.anchor_entry.name.value  # "kv"
        self.on_error = on_error
        self.written_tokens = self.loaded_tokens = 0
        self.written_bytes = self.loaded_bytes = 0
        self.hit_device = self.hit_host = self.hit_storage = 0
        self._probe("_log_write_ack_metrics", self._before_nothing, self._after_write)
        self._probe("loading_check", self._before_load, self._after_load)

    # ---- probes: SGLang's own acks, counted after SGLang processed them ---------------

    def _probe(self, name: str, before: Callable[[], Any], after: Callable[..., None]) -> None:
        original = getattr(self.cache, name)

        @functools.wraps(original)
        def probed(*args: Any, **kwargs: Any) -> Any:
            try:
                state = before()
            except Exception as exc:  # never into SGLang
                self.on_error(exc)
                return original(*args, **kwargs)
            result = original(*args, **kwargs)
            try:
                after(state, *args, **kwargs)
            except Exception as exc:
                self.on_error(exc)
            return result

        setattr(self.cache, name, probed)

    @staticmethod
    def _before_nothing() -> None:
        return None

    def _after_write(self, _state: None, ack: Any, *args: Any, **kwargs: Any) -> None:
        self.written_tokens += (ack.num_tokens_by_pool or {}).get(self.anchor, 0)
        self.written_bytes += int(ack.num_bytes)

    def _before_load(self) -> list[Any]:
        return list(self.controller.ack_load_queue)

    def _after_load(self, queued: list[Any], *args: Any, **kwargs: Any) -> None:
        # loading_check pops finished acks from the front of the queue and nothing else
        for ack in queued[: len(queued) - len(self.controller.ack_load_queue)]:
            self.loaded_tokens += (ack.num_tokens_by_pool or {}).get(self.anchor, 0)
            self.loaded_bytes += int(ack.num_bytes)

    # ---- per request ----------------------------------------------------------------

    def on_admit(self, req: Any) -> None:
        """Once per admitted request (plugin/tally.py's admission): its per-tier hits."""
        self.hit_device += int(req.cached_tokens_device)
        self.hit_host += int(req.cached_tokens_host)
        self.hit_storage += int(req.cached_tokens_storage)

    # ---- reads ----------------------------------------------------------------------

    def ledger(self, nodes: TreeNodes | None) -> HostLedger:
        """The host partition now; `nodes`: this instant's per-node read, or None."""
        tree_tokens = protected = None
        if nodes is not None:
            core = self.cache.tree_core
            tree_tokens = sum(tokens for node_id, tokens in zip(nodes.node_id, nodes.tokens)
                              if core.is_backuped(node_id))
            protected = None if self.cache.enable_storage else self._load_locked_tokens()
        return HostLedger(
            page_size=self.host_pool.page_size,
            capacity_tokens=int(self.host_pool.logical_size),
            free_tokens=int(self.host_pool.available_size()),
            tree_tokens=tree_tokens,
            protected_tokens=protected,
            write_policy=str(self.controller.write_policy),
        )

    def _load_locked_tokens(self) -> int:
        """Host copies on the root paths of in-flight load-backs (each path counted once)."""
        anchors = [lb.node_id for lb in self.cache.ongoing_load_back.values()]
        if not anchors:
            return 0
        core = self.cache.tree_core
        seen: dict[int, int] = {}
        for path in core.collect_path_info(anchors):
            for info in path:
                seen[info.node_id] = info.path_end - info.path_start
        return sum(tokens for node_id, tokens in seen.items() if core.is_backuped(node_id))

    def transfer_leases(self) -> list[tuple[str, int]]:
        """The tree locks SGLang's in-flight transfers hold, as (holder, node id) leases: a
        load-back locks its node until `loading_check` acks it, a write-through its node
        (when it took a lock) until `writing_check` does (unified_radix_cache.py)."""
        held = [(f"hicache-load:{ack}", entry.node_id)
                for ack, entry in self.cache.ongoing_load_back.items()]
        held += [(f"hicache-write:{ack}", entry.node_id)
                 for ack, entry in self.cache.ongoing_write_through.items()
                 if entry.lock_params is not None]
        return held

    def io(self) -> HiCacheIO:
        return HiCacheIO(
            written_tokens=self.written_tokens, loaded_tokens=self.loaded_tokens,
            written_bytes=self.written_bytes, loaded_bytes=self.loaded_bytes,
            pending_writes=len(self.cache.ongoing_write_through),
            pending_loads=len(self.cache.ongoing_load_back),
            hit_tokens_device=self.hit_device, hit_tokens_host=self.hit_host,
            hit_tokens_storage=self.hit_storage if self.cache.enable_storage else None,
        )

    def complete(self, snap: Snapshot, *, per_node: bool) -> Snapshot:
        """`snap` (just sampled, same instant) with the host tier filled in."""
        host = self.ledger(snap.tree_nodes if per_node else None)
        ledger = dataclasses.replace(snap.ledger, host=host, host_tokens=host.used_tokens,
                                     host_capacity_tokens=host.capacity_tokens)
        by_medium = tuple((m, t) for m, t in snap.tree.tokens_by_medium if m != "host")
        tree = dataclasses.replace(snap.tree, tokens_by_medium=by_medium
                                   + (("host", host.used_tokens),))
        return dataclasses.replace(snap, ledger=ledger, tree=tree, hicache=self.io())

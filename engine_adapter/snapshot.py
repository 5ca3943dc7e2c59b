"""The immutable `Snapshot`: everything the CLI, TUI and exporter ever see of an engine.

An engine produces one `Snapshot` per consistent read (DESIGN.md "Instrumentation"). It holds
plain numbers, strings and tuples only, never SGLang objects, so it can be pickled across
processes, rendered by the TUI and turned into metrics without touching the engine.

Convention for quantities an engine cannot observe (a remote server hides per-request lock
refs and private tokens): the field is `None`, and renderers show "not observable". A
missing quantity is never filled with a guess and never shown as 0 or 100%.

Token counts in the pool ledger are token *slots* (the allocator's unit): a page that holds
3 live rows of 16 still occupies 16 slots. Rows actually written are reported separately
(`private_filled_tokens`) so the paged tail waste is visible (seed 000 0x02G).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine_adapter.fleet_view import ReplicaView, RouterView
from engine_adapter.funnel import Funnel
from engine_adapter.hicache_state import HiCacheIO, HostLedger  # noqa: F401 (re-exported)
from engine_adapter.tree_nodes import EMPTY, TreeNodes, TreeNodeView  # noqa: F401 (re-exported)
from engine_adapter.whatif_view import WhatIfCurve, WhatIfPoint  # noqa: F401 (re-exported)


def u_kv_of(pool_tokens: int, free_tokens: int) -> float:
    """seed 003 eq. (8) from two counters: (N_pool - N_free) / N_pool; 0.0 for no pool."""
    if pool_tokens <= 0:
        return 0.0
    return (pool_tokens - free_tokens) / pool_tokens


def token_usage_of(pool_tokens: int, free_tokens: int, evictable_tokens: int) -> float:
    """SGLang's token_usage from three counters: (N_pool - N_free - N_evictable) / N_pool."""
    if pool_tokens <= 0:
        return 0.0
    return (pool_tokens - free_tokens - evictable_tokens) / pool_tokens


@dataclass(frozen=True, kw_only=True)
class PoolLedger:
    """The device pool partition (seed 000 0x0CF reconciliation gauges).

    ::

        N_pool = N_free + N_evictable + N_protected + N_private  (+ residual = leak)
                 allocator  tree, lock 0  tree, locked  held by live requests outside the tree

    `used_tokens` is what SGLang calls used (`sglang:kv_used_tokens`): protected + private
    when both are observable, else the server's own number.
    """

    page_size: int
    pool_tokens: int
    free_tokens: int
    evictable_tokens: int
    used_tokens: int
    protected_tokens: int | None
    private_tokens: int | None
    private_filled_tokens: int | None = None
    host_tokens: int | None = 0  # None: a host tier exists and kvctl could not read it
    host_capacity_tokens: int | None = None
    host: HostLedger | None = None  # SGLang HiCache's host pool; None: no such tier

    @property
    def residual_tokens(self) -> int:
        """Slots accounted to nobody (a leak when > 0, a double count when < 0)."""
        return self.pool_tokens - (self.free_tokens + self.evictable_tokens + self.used_tokens)

    @property
    def tail_slots(self) -> int | None:
        """Allocated but unwritten slots in requests' last pages (seed 000 0x02G)."""
        if self.private_tokens is None or self.private_filled_tokens is None:
            return None
        return self.private_tokens - self.private_filled_tokens

    @property
    def u_kv(self) -> float:
        """seed 003 eq. (8): U_KV = allocated blocks / total blocks (evictable counts)."""
        return u_kv_of(self.pool_tokens, self.free_tokens)

    @property
    def token_usage(self) -> float:
        """SGLang's `token_usage`: (max_total - (available + evictable)) / max_total.

        Evictable (cached, unlocked) tokens count as unused here, so token_usage can read low
        while U_KV is near 1: the gap `u_kv - token_usage` is the evictable share.
        """
        return token_usage_of(self.pool_tokens, self.free_tokens, self.evictable_tokens)

    @property
    def evictable_gap(self) -> float:
        """U_KV minus token_usage: memory pressure that token_usage hides."""
        return self.u_kv - self.token_usage

    def pages(self, tokens: int | None) -> int | None:
        """Token slots to pages (every ledger term is page aligned)."""
        return None if tokens is None else tokens // self.page_size


@dataclass(frozen=True, kw_only=True)
class NodeRefCheck:
    """One tree node whose recorded lock count differs from the leases that explain it.

    seed 000 0x04B / 0x0CF: delta_ref = recorded - derived; non-zero after a step is an
    ownership-integrity alert. `requests` names the leases whose locked path includes the node.
    """

    node_id: int
    recorded: int
    derived: int
    tokens: int
    requests: tuple[str, ...] = ()

    @property
    def delta(self) -> int:
        return self.recorded - self.derived


@dataclass(frozen=True, kw_only=True)
class RefReconciliation:
    """Refcount reconciliation summary.

    `recorded_protected_tokens` is the tree's own protected size; `derived_protected_tokens`
    is the size of the union of paths locked by live leases. `per_node` says whether per-node
    lock refs were observable (Python tree core, or a pretty-print read of the Rust core);
    when False only the token-level comparison exists. `None` fields: not observable.
    """

    leases: int | None
    recorded_protected_tokens: int | None
    derived_protected_tokens: int | None
    nodes_checked: int | None
    per_node: bool
    off_nodes: tuple[NodeRefCheck, ...] = ()

    @property
    def delta_protected_tokens(self) -> int | None:
        if self.recorded_protected_tokens is None or self.derived_protected_tokens is None:
            return None
        return self.recorded_protected_tokens - self.derived_protected_tokens

    @property
    def delta_ref_max(self) -> int | None:
        """Largest |delta_ref| over nodes (0 when clean); None when not observable."""
        if self.nodes_checked is None and self.delta_protected_tokens is None:
            return None
        return max((abs(n.delta) for n in self.off_nodes), default=0)

    @property
    def ok(self) -> bool | None:
        if self.delta_protected_tokens is None and self.nodes_checked is None:
            return None
        return not self.off_nodes and not self.delta_protected_tokens


@dataclass(frozen=True, kw_only=True)
class MappingLag:
    """seed 000 0x06 / 0x0CF: L_map = max(0, f_required - f_ready) for K/V that must be
    resident before a request can run (a host-tier reload after a tool wait)."""

    waiting_requests: int
    lag_tokens: int
    max_wait_seconds: float
    stalls_total: int
    stall_seconds_total: float


@dataclass(frozen=True, kw_only=True)
class Alert:
    """An active alert with the evidence that makes it true (never a bare threshold)."""

    name: str
    severity: str
    evidence: str


@dataclass(frozen=True, kw_only=True)
class TreeStats:
    """Shape of the prefix index."""

    nodes: int | None
    cached_tokens: int | None
    max_depth_tokens: int | None = None
    leaves: int | None = None
    tokens_by_medium: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, kw_only=True)
class RequestView:
    """One request as an operator sees it (no token ids, no prompt text)."""

    rid: str
    state: str  # waiting | running | retained | offloaded | reloading | finished
    namespace: str  # hashed or allow-listed label, never raw
    prompt_tokens: int
    output_tokens: int
    prefix_hit_tokens: int
    retention: str | None = None
    lease_node: int | None = None


@dataclass(frozen=True, kw_only=True)
class Counters:
    """Monotone totals since the engine started (Prometheus counters).

    `None`: not observable by this engine (a remote server publishes no such series)."""

    steps: int | None = 0
    requests_submitted: int | None = 0
    requests_finished: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    recomputed_tokens: int = 0
    decode_tokens: int = 0
    evictions: int = 0
    evicted_tokens: int = 0
    retractions: int | None = 0
    retracted_tokens: int | None = 0
    allocation_failures: int | None = 0  # an allocation that failed even after eviction
    locked_eviction_rejects: int | None = 0  # evictions that fell short because the rest is locked
    admission_deferrals: int | None = 0  # admissions held back by the tau_high ceiling
    offload_bytes: int | None = 0
    reload_bytes: int | None = 0
    offloaded_tokens: int | None = 0
    reloaded_tokens: int | None = 0
    mapping_stalls: int | None = 0  # host-tier reloads a request had to wait for
    mapping_stall_seconds: float | None = 0.0  # modeled seconds spent waiting for them
    kv_events: int | None = 0  # None: SGLang's own publisher drains the events (plugin)


@dataclass(frozen=True, kw_only=True)
class EngineInfo:
    """Static description of the engine (Prometheus info metric)."""

    engine: str  # embedded | remote
    tree_core: str  # rust | python | remote
    page_size: int
    eviction_policy: str
    pool_tokens: int
    kv_pool: str  # MHATokenToKVPool | NoOpMHATokenToKVPool | remote
    sglang_version: str
    model: str = ""
    bytes_per_token: int | None = None


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """One consistent read of an engine. Immutable; safe to share across threads."""

    seq: int
    virtual_time_s: float
    wall_time_s: float
    info: EngineInfo
    ledger: PoolLedger
    funnel: Funnel
    refs: RefReconciliation
    mapping: MappingLag | None  # None: not observable (remote)
    counters: Counters
    tree: TreeStats
    alerts: tuple[Alert, ...] = ()
    requests: tuple[RequestView, ...] = ()
    tree_nodes: TreeNodes = EMPTY  # filled only by per-node reads (a tuple of views is converted)
    connected: bool = True
    notes: tuple[str, ...] = field(default=())
    hicache: HiCacheIO | None = None  # SGLang HiCache transfers and tier hits; None: no HiCache
    whatif: WhatIfCurve | None = None  # the what-if shadow's curve; None: not observable
    # With kvctl's plugin, `ledger` is the plugin's sample (every term from one instant, so
    # free + evictable + protected + private = pool) and these keep what else was read:
    # server_ledger  SGLang's own /metrics gauges, refreshed only when its scheduler logs a
    #                batch (they lag the tree by seconds); None without a plugin (then they
    #                are `ledger` itself)
    # rank_ledgers   one plugin sample per DP rank when the server runs several; `ledger`
    #                is their sum (each rank's sample balances, so the sum does)
    server_ledger: PoolLedger | None = None
    rank_ledgers: tuple[PoolLedger, ...] = ()
    # A fleet's snapshot (engine_adapter/fleet_view.py): each replica beside the sum above,
    # and the router's own figures, from the same read; () and None for one engine
    replicas: tuple[ReplicaView, ...] = ()
    router: RouterView | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tree_nodes, TreeNodes):  # rows given: store them by column
            object.__setattr__(self, "tree_nodes", TreeNodes.of(self.tree_nodes))

    @property
    def hit_rate(self) -> float | None:
        """seed 003 eq. (2): H_prefix over everything admitted so far."""
        return self.funnel.hit_rate

"""What a fleet snapshot says per replica and what the router says about them (frozen, plain).

A fleet's `Snapshot` (engine_adapter/remote/fleet_aggregate.py) sums its connected replicas;
these views keep each replica beside that sum, and the router's own count of them, from the
same read, so a screen or a scrape never mixes instants:

    Snapshot.replicas  (ReplicaView, ...)   one per worker, in the fleet's order
    Snapshot.router    RouterView | None    None: not a fleet behind a router

Reading rule (snapshot.py): a replica that is down has `connected` False and every figure
None, never 0 (DESIGN.md "Fleets": it reads down, and the fleet total says it is partial);
a router whose metrics endpoint does not answer has `reachable` False and no figures.
"""

from __future__ import annotations

from dataclasses import dataclass

# `PoolLedger` in the annotations below is engine_adapter.snapshot.PoolLedger, not imported:
# snapshot.py imports this module, and the layering test forbids the loop even under
# TYPE_CHECKING (annotations are strings here, never evaluated).


@dataclass(frozen=True, kw_only=True)
class ReplicaView:
    """One replica as the fleet read it. `ledger` is its pool ledger (the kvctl plugin's
    sample when it has one); the counters are totals since the worker started."""

    url: str
    connected: bool
    ledger: PoolLedger | None = None  # None: down
    hit_rate: float | None = None  # seed 003 eq. (2) over this replica's requests
    requests_finished: int | None = None
    prompt_tokens: int | None = None
    hit_tokens: int | None = None
    load: int | None = None  # running + queued, as the worker reports them


@dataclass(frozen=True, kw_only=True)
class RouterWorkerView:
    """One worker as sglang-router counts it (its /metrics, `smg_worker_*{worker}`)."""

    url: str
    requests: int | None  # smg_worker_cb_outcomes_total, success + failure
    failures: int | None  # smg_worker_cb_outcomes_total{outcome="failure"}
    in_flight: int | None  # smg_worker_requests_active: the load cache_aware balances on
    healthy: bool | None  # smg_worker_health
    circuit: str | None  # smg_worker_cb_state: closed | open | half_open


@dataclass(frozen=True, kw_only=True)
class RouterView:
    """The router's own metrics at the time of the fleet read."""

    metrics_url: str
    reachable: bool
    error: str | None = None  # why there are no figures (unreachable, not this router's)
    requests: int | None = None  # smg_router_requests_total, every endpoint
    workers: tuple[RouterWorkerView, ...] = ()

    @property
    def known(self) -> bool:
        """The figures are this router's: its endpoint answered and counts this fleet."""
        return self.reachable and self.error is None

    def worker(self, url: str) -> RouterWorkerView | None:
        return next((w for w in self.workers if w.url == url), None)

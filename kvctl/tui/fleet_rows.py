"""The fleet table's rows, one wording for `kvctl inspect` and `kvctl monitor`'s Fleet panel.

    replica          state  pool     free ... hit rate  load | router: requests  in flight  circuit
    http://w0:30000  up     4,096   3,680 ...    52.7%     0 |               12          0   closed
    http://w1:30001  DOWN   unknown ...                      |                6          0     open
    all (partial: 1 of 2 down)  4,096 ...  (the sum of the replicas that answered)  |   18

From one fleet snapshot (`Snapshot.replicas`, `Snapshot.router`: engine_adapter/fleet_view.py),
so every figure on a row and the sum come from the same read. A replica that is down reads
DOWN and its figures "unknown", never 0 (DESIGN.md "Fleets"); the sum says it is partial.
The router's columns are the router's own counts (its /metrics), "unknown" when its metrics
endpoint did not answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine_adapter.fleet_view import RouterView
    from engine_adapter.snapshot import PoolLedger, Snapshot

UNKNOWN = "unknown"
COLUMNS = ("replica", "state", "pool", "free", "evictable", "protected", "private",
           "hit rate", "load")
ROUTER_COLUMNS = ("router: requests", "in flight", "circuit")


def _n(value) -> str:
    return UNKNOWN if value is None else f"{value:,}"


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _ledger_cells(ledger: "PoolLedger | None") -> tuple[str, ...]:
    if ledger is None:
        return (UNKNOWN,) * 5
    return (_n(ledger.pool_tokens), _n(ledger.free_tokens), _n(ledger.evictable_tokens),
            _n(ledger.protected_tokens), _n(ledger.private_tokens))


def total_label(snapshot: "Snapshot") -> str:
    """"all", or "all (partial: k of n down)" when a replica did not answer."""
    down = sum(1 for r in snapshot.replicas if not r.connected)
    return f"all (partial: {down} of {len(snapshot.replicas)} down)" if down else "all"


def router_state(router: "RouterView | None") -> str | None:
    """A line on the router's metrics; None when the fleet has no router."""
    if router is None:
        return None
    if not router.known:  # down, or not this fleet's router
        return f"router metrics {router.metrics_url}: unknown ({router.error})"
    return f"router metrics {router.metrics_url}: {_n(router.requests)} requests routed"


def fleet_rows(snapshot: "Snapshot") -> list[tuple[str, ...]]:
    """One row per replica, then the sum; router columns when the fleet has a router."""
    router = snapshot.router
    with_router = router is not None
    known = router is not None and router.known
    rows = []
    for replica in snapshot.replicas:
        row = (replica.url, "up" if replica.connected else "DOWN",
               *_ledger_cells(replica.ledger), _pct(replica.hit_rate) if replica.connected
               else UNKNOWN, _n(replica.load))
        if with_router:
            seen = router.worker(replica.url) if known else None
            row += ((_n(seen.requests), _n(seen.in_flight), seen.circuit or UNKNOWN)
                    if seen is not None else (UNKNOWN,) * 3)
        rows.append(row)
    live = snapshot.connected  # all down: the sum has nothing to add up
    total = (total_label(snapshot), "",
             *(_ledger_cells(snapshot.ledger) if live else (UNKNOWN,) * 5),
             _pct(snapshot.hit_rate) if live else UNKNOWN, "")
    if with_router:
        total += (_n(router.requests) if known else UNKNOWN, "", "")
    rows.append(total)
    return rows


def columns(snapshot: "Snapshot") -> tuple[str, ...]:
    return COLUMNS + (ROUTER_COLUMNS if snapshot.router is not None else ())

"""Metric families of a fleet (`kvctl exporter --url ROUTER`), appended to
`telemetry.metrics_table.METRICS`. The fleet's own figures are the unlabelled families (the
sum of the connected replicas); these keep each replica and the router beside it, all from
one read (Snapshot.replicas / Snapshot.router, engine_adapter/fleet_view.py):

    kvctl_fleet_replicas{state="up"|"down"}         replicas that answered / did not
    kvctl_replica_up{replica}                       1 up, 0 down
    kvctl_replica_pool_tokens{replica, state}       capacity, free, evictable, protected, private
    kvctl_replica_prefix_hit_ratio{replica}         H_prefix (seed 003 eq. 2) per replica
    kvctl_replica_prompt_tokens_total{replica}      prompt tokens it admitted
    kvctl_replica_hit_tokens_total{replica}         of which served from its prefix cache
    kvctl_replica_load_requests{replica}            running + queued, as it reports them
    kvctl_router_up                                 1: the router's metrics answered as this
                                                    fleet's router; 0: they did not
    kvctl_router_requests_total                     smg_router_requests_total
    kvctl_router_worker_requests_total{replica, outcome}  smg_worker_cb_outcomes_total
    kvctl_router_worker_in_flight{replica}          smg_worker_requests_active
    kvctl_router_worker_healthy{replica}            smg_worker_health
    kvctl_router_worker_circuit_state{replica, circuit}  1 for the breaker's state

`replica` is the worker's URL (a fleet has at most a few: low cardinality). A replica that is
down exports `kvctl_replica_up 0` and none of its figures (absent, never 0); an unreachable
router exports `kvctl_router_up 0` and none of its figures. The router's families are
re-exported here rather than scraped as a second target so that one `instance` holds the
fleet and every dashboard panel filters on it alone (docs/fleet.md "The fleet live").
One engine (not a fleet) exports none of these.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine_adapter.snapshot import Snapshot
from telemetry.metric_spec import MetricSpec, Sample

REPLICA_POOL_STATES = ("capacity", "free", "evictable", "protected", "private")


def _replicas(s: Snapshot) -> Iterable[Sample]:
    if not s.replicas:
        return ()
    up = sum(1 for r in s.replicas if r.connected)
    return (Sample(("up",), up), Sample(("down",), len(s.replicas) - up))


def _replica_up(s: Snapshot) -> Iterable[Sample]:
    return (Sample((r.url,), 1.0 if r.connected else 0.0) for r in s.replicas)


def _replica_pool(s: Snapshot) -> Iterable[Sample]:
    for r in s.replicas:
        led = r.ledger
        if led is None:  # down: no figures
            continue
        values = (led.pool_tokens, led.free_tokens, led.evictable_tokens,
                  led.protected_tokens, led.private_tokens)
        for state, v in zip(REPLICA_POOL_STATES, values, strict=True):
            yield Sample((r.url, state), v)


def _replica(field: str):
    def read(s: Snapshot) -> Iterable[Sample]:
        return (Sample((r.url,), getattr(r, field)) for r in s.replicas)

    return read


def _router_known(s: Snapshot) -> bool:
    return s.router is not None and s.router.known


def _router_up(s: Snapshot) -> Iterable[Sample]:
    return () if s.router is None else (Sample((), 1.0 if _router_known(s) else 0.0),)


def _router_requests(s: Snapshot) -> Iterable[Sample]:
    return (Sample((), s.router.requests),) if _router_known(s) else ()


def _router_worker_requests(s: Snapshot) -> Iterable[Sample]:
    if not _router_known(s):
        return
    for w in s.router.workers:
        if w.requests is None:
            continue
        yield Sample((w.url, "failure"), w.failures)
        yield Sample((w.url, "success"), w.requests - (w.failures or 0))


def _router_worker(field: str):
    def read(s: Snapshot) -> Iterable[Sample]:
        if not _router_known(s):
            return ()
        return (Sample((w.url,), None if (v := getattr(w, field)) is None else float(v))
                for w in s.router.workers)

    return read


def _router_circuit(s: Snapshot) -> Iterable[Sample]:
    if not _router_known(s):
        return ()
    return (Sample((w.url, w.circuit), 1.0) for w in s.router.workers if w.circuit is not None)


def _g(name: str, help: str, labels: tuple[str, ...], read) -> MetricSpec:
    return MetricSpec(name=name, kind="gauge", help=help, labels=labels, read=read)


def _c(name: str, help: str, labels: tuple[str, ...], read) -> MetricSpec:
    return MetricSpec(name=name, kind="counter", help=help, labels=labels, read=read)


FLEET_METRICS: tuple[MetricSpec, ...] = (
    _g("kvctl_fleet_replicas", "Replicas of the fleet that answered (up) and did not (down); "
       "the unlabelled families sum the up ones only.", ("state",), _replicas),
    _g("kvctl_replica_up", "1 when the replica answered this read, 0 when it is down (then "
       "none of its figures are exported).", ("replica",), _replica_up),
    _g("kvctl_replica_pool_tokens", "Per replica: pool token slots (capacity) and the ledger "
       "states free, evictable, protected, private.", ("replica", "state"), _replica_pool),
    _g("kvctl_replica_prefix_hit_ratio", "Per replica: H_prefix since it started "
       "(seed 003 eq. 2).", ("replica",), _replica("hit_rate")),
    _c("kvctl_replica_prompt_tokens_total", "Per replica: prompt tokens admitted.",
       ("replica",), _replica("prompt_tokens")),
    _c("kvctl_replica_hit_tokens_total", "Per replica: prompt tokens served from its prefix "
       "cache.", ("replica",), _replica("hit_tokens")),
    _g("kvctl_replica_load_requests", "Per replica: running + queued requests it reports.",
       ("replica",), _replica("load")),
    _g("kvctl_router_up", "1 when the router's own /metrics answered and counts this fleet's "
       "workers; 0 when not (then no kvctl_router_* figure is exported).", (), _router_up),
    _c("kvctl_router_requests_total", "Requests the router routed (sglang-router "
       "smg_router_requests_total, every endpoint).", (), _router_requests),
    _c("kvctl_router_worker_requests_total", "Requests the router forwarded to each replica, "
       "by outcome (smg_worker_cb_outcomes_total).", ("replica", "outcome"),
       _router_worker_requests),
    _g("kvctl_router_worker_in_flight", "Requests in flight to each replica as the router "
       "counts them (smg_worker_requests_active).", ("replica",),
       _router_worker("in_flight")),
    _g("kvctl_router_worker_healthy", "1 when the router holds the replica healthy "
       "(smg_worker_health).", ("replica",), _router_worker("healthy")),
    _g("kvctl_router_worker_circuit_state", "1 for the state of the router's circuit breaker "
       "to each replica (smg_worker_cb_state: closed, open, half_open).",
       ("replica", "circuit"), _router_circuit),
)
# What a fleet read says truthfully even when every replica is down (collector DOWN_FAMILIES)
FLEET_DOWN_FAMILIES = tuple(spec.name for spec in FLEET_METRICS)

"""Merge the plugin's snapshot into a remote read (pure): one Snapshot, the same fields the
embedded engine fills.

The remote read (remote/snapshot_build.py) observes SGLang's /metrics and the KV-event
mirror; the plugin (inside the scheduler, instrument/sampler.py) observes the scheduler's
own objects. Rule: the ledger is the plugin's, whole (issue 26: one consistent sample);
any other field the remote read has is kept, and a field it cannot observe (None, or empty
where "empty" means "not published") is taken from the plugin::

    field              remote read                    taken from the plugin
    ledger             -> server_ledger (SGLang's     every term: pool, free, evictable,
                       gauges, shown as SGLang's)     used, protected, private, private_filled
                                                      (host capacity from the remote if None)
    rank_ledgers       none                           one per DP rank (plugin_ranks.py)
    refs               all None                       the whole reconciliation (delta_ref,
                                                      per-node off_nodes when per_node)
    funnel             requests + executed_hits       the whole funnel when the plugin
                       tokens only                    observes stages the remote cannot
    mapping            None                           the plugin's (None when it cannot know)
    counters           None fields                    the plugin's value for each
    tree               mirror tokens; nodes None      nodes, leaves, depth when None
    tree_nodes         empty                          the per-node read
    requests           none                           the plugin's RequestViews (no tokens)
    ledger.host,       None                           SGLang HiCache's host partition and
    hicache                                           transfers (hicache_reader.py)
    alerts             remote alerts                  + the plugin's, by name, no duplicates

Why the ledger is not mixed: SGLang refreshes its pool gauges only when the scheduler logs
a batch, while the plugin samples the tree and allocator together at a step boundary. Terms
from the two instants do not add up (read under traffic on `kvctl sandbox`: 3,736, 3,872
and 4,112 for a 4,096-token pool), and after traffic stops the gauges can lag for seconds
(used 600 while the tree held 0 locked). The plugin's sample balances by construction
(free + evictable + protected + private = pool, residual = a real leak).

The funnel is taken whole, not stage by stage: the remote's stage counts come from SGLang's
`num_requests_total` (finished requests) and the plugin's from arrivals it counted, so a mix
could break `requests >= authorized >= ...` (engine_adapter/funnel.py). `info.engine` becomes
"remote+plugin": the monitor then shows per-request and per-node panels, and the exporter's
info metric says where the numbers come from.
"""

from __future__ import annotations

import dataclasses

from engine_adapter.remote.snapshot_build import NOT_OBSERVABLE
from engine_adapter.snapshot import Counters, Snapshot

ENGINE = "remote+plugin"
_TREE_FILL = ("nodes", "cached_tokens", "max_depth_tokens", "leaves")


def merge(remote: Snapshot, plugin: Snapshot, *, plugin_url: str) -> Snapshot:
    """`remote` completed with what `plugin` observes (see module docstring)."""
    ledger = plugin.ledger
    if ledger.host_capacity_tokens is None and remote.ledger.host_capacity_tokens is not None:
        ledger = dataclasses.replace(ledger,
                                     host_capacity_tokens=remote.ledger.host_capacity_tokens)
    tree = dataclasses.replace(remote.tree, **_fill(remote.tree, plugin.tree, _TREE_FILL))
    if not remote.tree.tokens_by_medium and plugin.tree.tokens_by_medium:
        tree = dataclasses.replace(tree, tokens_by_medium=plugin.tree.tokens_by_medium)
    counters = dataclasses.replace(remote.counters, **_fill(
        remote.counters, plugin.counters, tuple(f.name for f in dataclasses.fields(Counters))))
    funnel = plugin.funnel if _observed_stages(plugin) > _observed_stages(remote) else remote.funnel
    names = {a.name for a in remote.alerts}
    alerts = remote.alerts + tuple(a for a in plugin.alerts if a.name not in names)
    info = dataclasses.replace(
        remote.info, engine=ENGINE, tree_core=plugin.info.tree_core,
        kv_pool=plugin.info.kv_pool, pool_tokens=ledger.pool_tokens,
        bytes_per_token=remote.info.bytes_per_token or plugin.info.bytes_per_token,
    )  # fmt: skip
    steps = plugin.counters.steps
    note = (f"plugin {plugin_url}: sample #{plugin.seq:,}"
            + (f" at step {steps:,}" if steps is not None else "")
            + "; ledger (one sample), refs, funnel, requests and tree nodes from inside the "
            "scheduler; SGLang's /metrics pool gauges shown as SGLang's (they refresh only "
            "when its scheduler logs a batch)")
    notes = tuple(n for n in remote.notes if n not in NOT_OBSERVABLE)
    notes += (note,) + tuple(f"plugin: {n}" for n in plugin.notes)
    return dataclasses.replace(
        remote, info=info, ledger=ledger, funnel=funnel,
        refs=plugin.refs if remote.refs.ok is None else remote.refs,
        mapping=remote.mapping if remote.mapping is not None else plugin.mapping,
        counters=counters, tree=tree,
        tree_nodes=remote.tree_nodes if len(remote.tree_nodes) else plugin.tree_nodes,
        requests=remote.requests or plugin.requests, alerts=alerts, notes=notes,
        hicache=remote.hicache if remote.hicache is not None else plugin.hicache,
        whatif=remote.whatif if remote.whatif is not None else plugin.whatif,
        server_ledger=remote.ledger, rank_ledgers=plugin.rank_ledgers,
    )  # fmt: skip


def _fill(ours: object, theirs: object, names: tuple[str, ...]) -> dict:
    """{name: theirs.name} for each field that is None in `ours` and set in `theirs`."""
    return {name: getattr(theirs, name) for name in names
            if getattr(ours, name) is None and getattr(theirs, name) is not None}


def _observed_stages(snapshot: Snapshot) -> int:
    return sum(stage.requests is not None for stage in snapshot.funnel.stages)


def plugin_down(remote: Snapshot, read) -> Snapshot:
    """`remote` as is, plus an alert and a note saying the plugin gave nothing current.

    `read` is a PluginRead that is not ok: none of its numbers (there are none) and none of
    an earlier good read's are used, so every plugin-only field stays None (not observable).
    """
    from engine_adapter.snapshot import Alert

    severity = "info" if read.state == "starting" else "warning"
    evidence = f"{read.url}: {read.state}: {read.error}; plugin fields are not observable"
    alert = Alert(name="plugin_unavailable", severity=severity, evidence=evidence)
    return dataclasses.replace(remote, alerts=remote.alerts + (alert,),
                               notes=(f"plugin {read.state}: {read.error}",) + remote.notes)

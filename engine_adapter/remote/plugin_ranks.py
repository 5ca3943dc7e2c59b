"""Read kvctl's plugin on every data-parallel rank of one server, as one plugin read.

An SGLang server started with `--dp-size N` runs N schedulers, each with its own KV pool and
radix tree; the plugin serves rank r on `port_base + r` and `/server_info` announces
`kvctl_plugin: {"url", "port_base", "dp_size"}` (engine_adapter/plugin/server_info.py)::

    rank 0   http://HOST:port_base        PluginClient ─┐
    rank 1   http://HOST:port_base + 1    PluginClient ─┤ all "ok" -> one PluginRead whose
    ...                                                 │ snapshot sums the ranks
    rank N-1 http://HOST:port_base + N-1  PluginClient ─┘ (fleet_aggregate.aggregate) and
                                                          keeps each rank's ledger

The sum is only formed from a read of every rank: each rank's sample balances
(free + evictable + protected + private = its pool), so the sum does too, and a rank that
is not "ok" makes the whole read that rank's failure (its state, the error naming the rank)
rather than half a pool beside a whole one. One rank (dp_size 1) is PluginClient's read as
is. Mutates only its clients' backoff state.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.parse

from engine_adapter.remote.fleet_aggregate import aggregate
from engine_adapter.remote.plugin_client import PluginClient, PluginRead
from engine_adapter.snapshot import Snapshot


def rank_urls(base_url: str, dp_size: int) -> list[str]:
    """The endpoint of each DP rank: the base URL's port plus the rank."""
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    port = parts.port or 80
    return [f"{parts.scheme}://{host}:{port + rank}" for rank in range(max(dp_size, 1))]


class PluginRanks:
    """One PluginClient per DP rank; `read()` is one PluginRead (see module docstring)."""

    def __init__(self, base_url: str, *, dp_size: int = 1, token: str | None = None,
                 timeout_s: float = 2.0) -> None:
        self.clients = [PluginClient(url, token=token, timeout_s=timeout_s)
                        for url in rank_urls(base_url, dp_size)]

    @property
    def url(self) -> str:
        return self.clients[0].url

    def read(self, now: float | None = None) -> PluginRead:
        now = time.monotonic() if now is None else now
        reads = [client.read(now) for client in self.clients]
        if len(reads) == 1:
            return reads[0]
        for rank, read in enumerate(reads):
            if not read.ok:
                return dataclasses.replace(
                    read, error=f"DP rank {rank} of {len(reads)} ({read.url}): {read.error}")
        return dataclasses.replace(reads[0], snapshot=sum_ranks(
            [(read.url, read.snapshot) for read in reads]))


def sum_ranks(ranks: list[tuple[str, Snapshot]]) -> Snapshot:
    """The server's snapshot from its ranks' samples: ledger, counters, funnel, refs and tree
    summed; `rank_ledgers` keeps each rank's; requests from every rank; per-node tree rows
    (node ids are per rank) from rank 0 only, said in a note."""
    first = ranks[0][1]
    total = aggregate(ranks, seq=first.seq, wall_time_s=first.wall_time_s)
    ledger = total.ledger
    info = dataclasses.replace(first.info, pool_tokens=ledger.pool_tokens)
    note = (f"DP {len(ranks)} ranks: ledger, counters, funnel and refs summed over "
            + ", ".join(url for url, _ in ranks) + "; tree nodes of rank 0")
    return dataclasses.replace(
        total, info=info, mapping=first.mapping, tree_nodes=first.tree_nodes,
        requests=tuple(r for _, snap in ranks for r in snap.requests),
        rank_ledgers=tuple(snap.ledger for _, snap in ranks),
        notes=(note,) + tuple(n for n in first.notes),
    )  # fmt: skip

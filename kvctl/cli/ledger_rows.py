"""The pool ledger as label/value rows for `kvctl inspect` (people), one sample per row.

With kvctl's plugin the ledger is the plugin's sample: its terms add up to the pool in every
read. SGLang's own /metrics gauges follow on a row of their own, labelled as SGLang's (they
are refreshed only when its scheduler logs a batch, so they lag), and a data-parallel server
gets one row per rank after the sum::

    pool tokens                                        8,192
    free / evictable / protected / private   88 / 5,720 / 1,752 / 632 (sum 8,192 = pool)
    SGLang /metrics free / evictable / used        40 / 5,800 / 2,352 of 8,192 (lags)
    DP rank 0 free / evictable / protected / private  ... of 4,096
"""

from __future__ import annotations

from engine_adapter.snapshot import PoolLedger, Snapshot


def _n(value) -> str:
    return "not observable" if value is None else f"{value:,}"


def terms_sum(ledger: PoolLedger) -> int | None:
    """free + evictable + protected + private, or None when a term is not observable."""
    if ledger.protected_tokens is None or ledger.private_tokens is None:
        return None
    return (ledger.free_tokens + ledger.evictable_tokens + ledger.protected_tokens
            + ledger.private_tokens)


def _terms(ledger: PoolLedger) -> str:
    total = terms_sum(ledger)
    check = "" if total is None else (
        f" (sum {total:,} = pool)" if total == ledger.pool_tokens
        else f" (sum {total:,} != pool {ledger.pool_tokens:,})")
    return (f"{ledger.free_tokens:,} / {ledger.evictable_tokens:,} / "
            f"{_n(ledger.protected_tokens)} / {_n(ledger.private_tokens)}{check}")


def ledger_rows(s: Snapshot) -> list[tuple[str, str]]:
    ledger = s.ledger
    rows = [("pool tokens", _n(ledger.pool_tokens))]
    if ledger.protected_tokens is None:  # no plugin: SGLang's gauges are the ledger
        rows.append(("free / evictable / used (SGLang /metrics)",
                     f"{ledger.free_tokens:,} / {ledger.evictable_tokens:,} / "
                     f"{ledger.used_tokens:,}"))
        rows.append(("protected / private", "not observable (no kvctl plugin)"))
    else:
        rows.append(("free / evictable / protected / private", _terms(ledger)))
    server = s.server_ledger
    if server is not None:
        rows.append(("SGLang /metrics free / evictable / used",
                     f"{server.free_tokens:,} / {server.evictable_tokens:,} / "
                     f"{server.used_tokens:,} of {server.pool_tokens:,} (lags)"))
    for rank, rank_ledger in enumerate(s.rank_ledgers):
        rows.append((f"DP rank {rank} free / evictable / protected / private",
                     f"{_terms(rank_ledger)} of {rank_ledger.pool_tokens:,}"))
    return rows

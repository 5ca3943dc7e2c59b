"""Remote reconciliation: the event mirror against the server's own pool gauges.

A remote attach cannot see lock refs or private tokens (seed 000 0x0CF's N_protected and
N_private are inside the scheduler), so the embedded ledger check is replaced by a band
check. SGLang 0.5.23 defines (`pool_stats_observer._get_token_info`):

::

    kv_used = max_total - (kv_available + kv_evictable)     = protected + private
    tree slots on GPU = evictable + protected

    so   kv_evictable  <=  mirror GPU slots  <=  kv_evictable + kv_used
         (all private)      (blocks x page)       (nothing private)

`drift_tokens` is the signed distance of the mirror from that band (0 inside it). The
tolerance is `max(pages * page_size, ceil(pool_fraction * pool_tokens))` tokens: SGLang
refreshes the gauges when it logs stats (every `decode_log_interval` steps) while events
stream every step, so a few pages of skew are expected; a drift beyond that on
`consecutive_reads` reads in a row is an alert. Causes: lost KV events, a publisher that
restarted unseen, events disabled for part of the pool, or a server bug.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine_adapter.snapshot import Alert


@dataclass(frozen=True, kw_only=True)
class DriftTolerance:
    """How far the mirror may sit outside the band before `remote_reconciliation_drift`."""

    pages: int = 4
    pool_fraction: float = 0.01
    consecutive_reads: int = 2

    def tokens(self, *, page_size: int, pool_tokens: int) -> int:
        return max(self.pages * page_size, math.ceil(self.pool_fraction * pool_tokens))


@dataclass(frozen=True, kw_only=True)
class RemoteReconciliation:
    mirror_blocks: int  # pages the mirror holds on GPU
    mirror_slots: int  # mirror_blocks x page_size
    server_evictable_tokens: int
    server_used_tokens: int
    tolerance_tokens: int

    @property
    def lower_tokens(self) -> int:
        return self.server_evictable_tokens

    @property
    def upper_tokens(self) -> int:
        return self.server_evictable_tokens + self.server_used_tokens

    @property
    def drift_tokens(self) -> int:
        """Mirror minus the nearest band edge: > 0 mirror too big, < 0 too small, 0 inside."""
        if self.mirror_slots > self.upper_tokens:
            return self.mirror_slots - self.upper_tokens
        if self.mirror_slots < self.lower_tokens:
            return self.mirror_slots - self.lower_tokens
        return 0

    @property
    def within_tolerance(self) -> bool:
        return abs(self.drift_tokens) <= self.tolerance_tokens


def reconcile(
    *,
    mirror_blocks: int,
    page_size: int,
    evictable_tokens: int,
    used_tokens: int,
    pool_tokens: int,
    tolerance: DriftTolerance,
) -> RemoteReconciliation:
    return RemoteReconciliation(
        mirror_blocks=mirror_blocks,
        mirror_slots=mirror_blocks * page_size,
        server_evictable_tokens=evictable_tokens,
        server_used_tokens=used_tokens,
        tolerance_tokens=tolerance.tokens(page_size=page_size, pool_tokens=pool_tokens),
    )


def drift_alert(
    result: RemoteReconciliation, *, streak: int, required: int, mirror_complete: bool
) -> Alert | None:
    """The alert when the mirror has been out of tolerance on `required` reads in a row."""
    if result.within_tolerance or streak < required:
        return None
    history = "" if mirror_complete else "; mirror incomplete (KV-event batches lost)"
    return Alert(
        name="remote_reconciliation_drift",
        severity="warning",
        evidence=(
            f"mirror {result.mirror_blocks} GPU pages = {result.mirror_slots} slots outside "
            f"[evictable {result.lower_tokens}, evictable+used {result.upper_tokens}] by "
            f"{result.drift_tokens:+d} tokens (tolerance {result.tolerance_tokens}) on "
            f"{streak} reads{history}"
        ),
    )

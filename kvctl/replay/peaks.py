"""Peak U_KV and token_usage over every step of a replay, at O(1) a step.

The timeline samples snapshots on a virtual-time grid (timeline.py), so a peak read from
its rows could fall between samples. Both gauges are monotone in two counters every
`StepReport` already carries (the allocator's `available_size()` and the tree's
`evictable_size()`, read at the end of the step, the same reads the pool ledger makes):

    U_KV        = (N_pool - N_free) / N_pool                 peaks where N_free is least
    token_usage = (N_pool - N_free - N_evictable) / N_pool   peaks where N_free + N_evictable is least

so tracking the two minima is enough, and the peaks are computed with the ledger's own
formulas (engine_adapter.snapshot.u_kv_of / token_usage_of): equal, bit for bit, to the
best sampled snapshot whenever that snapshot is the peak step. Between a step's end and
the next step, a driver may only submit (no allocation) or flush the cache (evictable
becomes free: U_KV falls, token_usage is unchanged), so no peak is missed there.
"""

from __future__ import annotations

from engine_adapter.snapshot import token_usage_of, u_kv_of


class PoolPeaks:
    """Running minima of N_free and N_free + N_evictable. Mutates only itself."""

    def __init__(self, pool_tokens: int) -> None:
        self.pool_tokens = pool_tokens
        self._least_free = pool_tokens
        self._least_unused = pool_tokens

    def observe(self, free_tokens: int, evictable_tokens: int) -> None:
        """One step's end state (two comparisons)."""
        if free_tokens < self._least_free:
            self._least_free = free_tokens
        unused = free_tokens + evictable_tokens
        if unused < self._least_unused:
            self._least_unused = unused

    @property
    def u_kv(self) -> float:
        return u_kv_of(self.pool_tokens, self._least_free)

    @property
    def token_usage(self) -> float:
        return token_usage_of(self.pool_tokens, self._least_unused, 0)

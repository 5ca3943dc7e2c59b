"""Deterministic token ids for generated workloads.

Ids are synthetic but structured so that the cache sees exactly the sharing the scenario
describes: one system prompt for everybody, tool schemas by variant, and fresh ids for
everything a session writes itself. All ids stay below 2^30; the engine's synthetic output
ids live in [2^30, 2^31).

    [1, 1 + S)                  the shared system prompt
    [SCHEMA_BASE + v*T, ...)    tool-schema variant v (v = 0 is the stable one)
    [UNIQUE_BASE, 2^30)         session content, observations, timestamps, thoughts
"""

from __future__ import annotations

import numpy as np

SCHEMA_BASE = 1 << 20
UNIQUE_BASE = 1 << 24
LIMIT = 1 << 30


class TokenSpace:
    def __init__(self, system_tokens: int, schema_tokens: int) -> None:
        self.system = np.arange(1, 1 + system_tokens, dtype=np.int64)
        self.schema_tokens = schema_tokens
        self._schema_variants = 0
        self._next_unique = UNIQUE_BASE

    def schema(self, variant: int) -> np.ndarray:
        start = SCHEMA_BASE + variant * max(self.schema_tokens, 1)
        return np.arange(start, start + self.schema_tokens, dtype=np.int64)

    def new_schema_variant(self) -> int:
        self._schema_variants += 1
        return self._schema_variants

    def unique(self, count: int) -> np.ndarray:
        start = self._next_unique
        self._next_unique += count
        if self._next_unique >= LIMIT:
            raise OverflowError("scenario generated more than 2^30 unique tokens")
        return np.arange(start, start + count, dtype=np.int64)

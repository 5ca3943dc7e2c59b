"""Garbage-collector settings for the monitor's process, which owns its heap.

Two costs made frames stall (benchmarks/bench_tui.py):

- SGLang and torch leave millions of long-lived objects; one full collection over them took
  ~330 ms. Collected once and then frozen after the engine is built, they are skipped by
  every later pass (gc.freeze: they stay alive and reference counting still frees them).
- A frame allocates tens of thousands of short-lived objects (segments, strips, styles).
  With CPython's default first threshold (700 allocations) many of them are still alive at
  a collection, are promoted, and their promotion drives full collections of everything the
  UI holds. A first threshold of 10,000 lets them die first; the cyclic garbage kept
  waiting is at most that many objects.

Per-node tree reads add nothing here: they are stored by column (engine_adapter/tree_nodes.py).
"""

from __future__ import annotations

import gc

FIRST_GENERATION_THRESHOLD = 10_000


def settle_heap() -> None:
    """Collect, freeze what survives, and raise the first-generation threshold. Call once,
    after the long-lived state (an engine, SGLang's modules) exists."""
    gc.collect()
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(FIRST_GENERATION_THRESHOLD, second, third)

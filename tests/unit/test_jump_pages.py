"""`DirectCache.jump_pages`: the pages k single decode steps take, counted per residue.

Step j + 1 takes a page for every request whose committed length plus j is a multiple of
the page size (SGLang's `new_tokens_required_next_decode`); the count per residue must
equal the brute-force (steps x requests) table it replaced.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine_adapter.embedded.cache_ops import DirectCache

pytestmark = pytest.mark.unit


def table(committed: np.ndarray, steps: int, page: int) -> np.ndarray:
    offsets = np.arange(steps, dtype=np.int64)[:, None]
    per_step = ((committed[None, :] + offsets) % page == 0).sum(axis=1)
    return np.concatenate([[0], np.cumsum(per_step)])


def cache(page: int) -> DirectCache:
    return DirectCache(SimpleNamespace(allocator=SimpleNamespace(page_size=page)))


def test_small_batch_by_hand():
    """Lengths 16, 17, 31 at page 16 over 3 steps: step 1 takes a page for 16, step 2 for
    31 (31 + 1 = 32), step 3 none: cumulative 0, 1, 2, 2."""
    pages = cache(16).jump_pages(np.array([16, 17, 31], dtype=np.int64), 3)
    assert pages.tolist() == [0, 1, 2, 2]


def test_equals_the_step_by_request_table_on_random_batches():
    """500 random batches (page 1, 16, 64; up to 300 requests, up to 1,100 steps):
    equal to the brute-force table, element for element, as int64."""
    rng = np.random.default_rng(7)
    for _ in range(500):
        page = int(rng.choice([1, 16, 64]))
        committed = rng.integers(1, 200_000, size=int(rng.integers(0, 300))).astype(np.int64)
        steps = int(rng.integers(1, 1_100))
        got = cache(page).jump_pages(committed, steps)
        want = table(committed, steps, page)
        assert got.dtype == np.int64
        assert np.array_equal(got, want)

"""kvctl's CPU extend kernel (engine_adapter/embedded/alloc_kernel.py) against SGLang's own
`alloc_extend_naive`, on random batches shaped as the allocator calls it."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def _batch(rng: np.random.Generator, page: int):
    """A valid call: per request a prefix, an extend (possibly 0 or inside the last page),
    last_loc on an owned page consistent with the prefix, and enough free pages."""
    import torch

    bs = int(rng.integers(1, 9))
    prefix = rng.integers(0, 5 * page, size=bs)
    extend = rng.choice([0, 1, page - 1, page, page + 1, 3 * page + 5, 700], size=bs)
    extend[0] = max(extend[0], 1)
    seq = prefix + extend
    owned = rng.permutation(np.arange(1, 400))[:bs]
    last = np.where(prefix > 0, owned * page + (prefix - 1) % page, -1)
    need = int(sum(-(-int(s) // page) - -(-int(p) // page) for p, s in zip(prefix, seq)))
    free = rng.permutation(np.arange(400, 400 + need + int(rng.integers(0, 10))))
    as_t = lambda a: torch.tensor(np.asarray(a, dtype=np.int64))  # noqa: E731
    return as_t(prefix), as_t(seq), as_t(last), as_t(free), int(extend.sum())


@pytest.mark.parametrize("page", [1, 16, 64])
def test_fast_kernel_equals_sglang_naive_kernel(page):
    """Equal slot ids on 400 random batches per page size, phase 1-3 mixes included."""
    import torch
    from sglang.srt.mem_cache.allocator import paged

    from engine_adapter.embedded.alloc_kernel import alloc_extend_pages

    naive = getattr(paged.alloc_extend_naive, "sglang_kernel", paged.alloc_extend_naive)
    rng = np.random.default_rng(page)
    for _ in range(400):
        prefix, seq, last, free, total = _batch(rng, page)
        expected = torch.empty(total, dtype=torch.int64)
        got = torch.full((total,), -7, dtype=torch.int64)
        naive(prefix, seq, last, free, expected, page, "cpu")
        alloc_extend_pages(prefix, seq, last, free, got, page, "cpu")
        assert torch.equal(expected, got), (prefix, seq, last)


def test_install_routes_the_allocator_through_the_fast_kernel():
    """After install(), SGLang's allocator calls kvctl's kernel and still returns the ids
    SGLang's own kernel returns for the same free list."""
    import torch
    from sglang.srt.mem_cache.allocator import paged

    from engine_adapter.embedded.alloc_kernel import install

    install()
    assert hasattr(paged.alloc_extend_naive, "sglang_kernel")
    prefix = torch.tensor([0, 20], dtype=torch.int64)
    seq = torch.tensor([37, 50], dtype=torch.int64)
    last = torch.tensor([-1, 16 * 9 + 3], dtype=torch.int64)
    free = torch.arange(30, 40, dtype=torch.int64)
    out = torch.empty(67, dtype=torch.int64)
    paged.alloc_extend_naive(prefix, seq, last, free, out, 16, "cpu")
    expected = torch.empty(67, dtype=torch.int64)
    paged.alloc_extend_naive.sglang_kernel(prefix, seq, last, free, expected, 16, "cpu")
    assert torch.equal(out, expected)
    # request 0: pages 30, 31, 32 (37 tokens); request 1: 148..159 then pages 33, 34
    assert out[:3].tolist() == [480, 481, 482] and out[36].item() == 32 * 16 + 4
    assert out[37].item() == 16 * 9 + 4 and out[49].item() == 33 * 16

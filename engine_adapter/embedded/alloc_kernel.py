"""A CPU fast path for SGLang's paged extend allocation kernel, for the embedded engine.

`PagedTokenToKVPoolAllocator.alloc_extend` fills its output with one of two kernels: the
Triton `alloc_extend_kernel` on GPUs, `alloc_extend_naive` (torch, about 30 tensor ops
over every extended token) elsewhere. On this CPU the naive kernel was the largest single
cost of a replay (1-2 ms per call at Mooncake prompt lengths). `alloc_extend_pages`
computes the same output with numpy in a handful of vectorized ops. It is a kernel, not
a policy: the allocator still decides how many pages to take and takes them itself
(`free_pages[num_new_pages:]`), so which pages a request gets is unchanged.

For request i with prefix p, sequence end s and last_loc l (the slot of token p - 1):

    p                ceil_page(p)             floor_page(s)      s
    | phase 1         | phase 2: whole new pages | phase 3: part of |
    | l+1 .. (tail of | free_pages[k] * page + j | one more new page|
    | the last page)  |                          |                 |

phases 2 and 3 are request i's new pages, consecutive in `free_pages` after request
i - 1's, laid out slot by slot and cut at s. A request whose extend ends inside its last
page has only phase 1 (SGLang's `done_after_1`).

`install()` swaps the kernel in `sglang.srt.mem_cache.allocator.paged` for this process;
only the embedded engine calls it (never the plugin inside a real server, which runs
SGLang's own kernels). tests/unit/test_alloc_kernel.py checks equality with SGLang's
kernel on random batches, including prefixes inside a page and empty extends.
"""

from __future__ import annotations

import numpy as np

from engine_adapter.base.pages import ceil_div, page_ceil

_installed = False
FEW_REQUESTS = 8  # up to this batch size, build slots page by page per request


def alloc_extend_pages(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size,
                       device) -> None:
    """`alloc_extend_naive`'s contract: writes out_indices (int64, one slot per extended
    token, request after request) from the first new pages of `free_pages`."""
    import torch

    total = out_indices.shape[0]
    if total == 0:
        return
    prefix = prefix_lens.numpy().astype(np.int64, copy=False)
    seq = seq_lens.numpy().astype(np.int64, copy=False)
    last = last_loc.numpy().astype(np.int64, copy=False)
    page = int(page_size)
    ceil_prefix = page_ceil(prefix, page)
    phase1 = np.minimum(seq, ceil_prefix) - prefix
    rest = seq - prefix - phase1  # tokens on new pages
    pages = ceil_div(rest, page)
    page_start = np.cumsum(pages) - pages
    if len(seq) <= FEW_REQUESTS:  # page by page: a few long extends (prefill)
        out_indices.copy_(torch.from_numpy(_by_pages(free_pages, last, phase1, rest, pages,
                                                     page_start, page)))
        return
    extend = seq - prefix
    owner = np.repeat(np.arange(len(seq)), extend)
    local = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(extend) - extend, extend)
    in_phase1 = local < phase1[owner]
    if not pages.any():
        out = last[owner] + 1 + local
    else:
        fresh = free_pages[: int(pages.sum())].numpy().astype(np.int64, copy=False)
        new_slot = local - phase1[owner]
        new_slot[in_phase1] = 0
        slot_page = page_start[owner] + new_slot // page
        out = np.where(in_phase1, last[owner] + 1 + local,
                       fresh[np.minimum(slot_page, len(fresh) - 1)] * page + new_slot % page)
    out_indices.copy_(torch.from_numpy(out))


def _by_pages(free_pages, last, phase1, rest, pages, page_start, page: int) -> np.ndarray:
    """The same slots, request by request: phase 1 as a range, then whole new pages laid
    out slot by slot and cut at the request's end."""
    fresh = free_pages[: int(pages.sum())].numpy().astype(np.int64, copy=False)
    offsets = np.arange(page, dtype=np.int64)
    parts = []
    for i in range(len(last)):
        if phase1[i]:
            parts.append(np.arange(last[i] + 1, last[i] + 1 + phase1[i], dtype=np.int64))
        if rest[i]:
            start = page_start[i]
            slots = fresh[start : start + pages[i], None] * page + offsets
            parts.append(slots.reshape(-1)[: rest[i]])
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def install() -> None:
    """Use `alloc_extend_pages` as SGLang's CPU extend kernel in this process (idempotent).
    Only for CPU tensors: on another device SGLang's own kernels stay."""
    global _installed
    if _installed:
        return
    from sglang.srt.mem_cache.allocator import paged

    naive = paged.alloc_extend_naive

    def kernel(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
        if out_indices.device.type != "cpu":
            return naive(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size,
                         device)
        return alloc_extend_pages(prefix_lens, seq_lens, last_loc, free_pages, out_indices,
                                  page_size, device)

    kernel.sglang_kernel = naive
    paged.alloc_extend_naive = kernel
    _installed = True

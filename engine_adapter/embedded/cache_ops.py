"""The direct cache path: SGLang's tree and allocator calls without a `ScheduleBatch`.

A replay runs no forward pass, so building `ScheduleBatch` tensors every step buys nothing;
what SGLang's cache state depends on is the sequence of tree and allocator calls. This
module makes exactly the calls that `ScheduleBatch.prepare_for_extend` (through
`mem_cache/allocation.alloc_for_extend`), `check_decode_mem`, `retract_decode` and
`prepare_for_decode` (through `alloc_for_decode_default`) make on a CPU, paged, non-SWA,
non-speculative configuration, in the same order, with the same arguments, by calling
SGLang's own helpers wherever they exist (`alloc_req_slots`,
`alloc_paged_token_slots_extend`, `alloc_paged_token_slots_decode`, `release_req`,
`check_decode_capacity`). The ScheduleBatch path stays as the oracle
(`EngineConfig.exact_batches`); tests/integration/test_replay_call_fidelity.py compares
the two call by call.

One request's row in `req_to_token`, for an extend of [prefix_len, seq_len):

    0            prefix_len                    seq_len
    | prefix     | extend (out_cache_loc[pt : pt + extend_len]) |
      ^ new request: the tree's indices (prefix_device_indices)
      ^ a request holding its row: the row itself (rewritten unchanged, as SGLang does)

Pages: a request whose committed length c is a multiple of the page size needs a new page
for its next decode token (SGLang's `new_tokens_required_next_decode`):

    c = 31, page 16:  | 0..15 | 16..31 |          slot 31 fits its page: no new page
    c = 32, page 16:  | 0..15 | 16..31 | 32.. new page
"""

from __future__ import annotations

import numpy as np

from engine_adapter.embedded.hicache import split_tiers
from engine_adapter.embedded.sglang_runtime import SGLangComponents, stdout_to_stderr
from engine_adapter.base.pages import ceil_div, page_ceil  # noqa: F401  (re-exported)

# The messages SGLang's allocation helpers raise for an exhausted pool (allocation.py);
# any other RuntimeError is a real failure and propagates.
OUT_OF_MEMORY_PREFIXES = ("Prefill out of memory", "alloc_req_slots runs out of memory",
                          "Decode out of memory", "Out of memory")


def is_out_of_memory(err: RuntimeError) -> bool:
    """Whether `err` is SGLang's out-of-memory error (not any other RuntimeError)."""
    return str(err).startswith(OUT_OF_MEMORY_PREFIXES)


class DirectCache:
    """SGLang's extend / decode / retract cache calls on live `Req`s. Mutates the tree,
    the allocator, `req_to_token` and each `Req`'s `kv` record exactly as the batch
    methods it replaces do; holds no state of its own."""

    def __init__(self, sg: SGLangComponents) -> None:
        self.sg = sg
        self.page = sg.allocator.page_size

    # ---- extend (prefill, chunk continuation, reload span, quantum decode) -----------

    def extend(self, reqs: list) -> tuple[object, list[int]]:
        """`alloc_for_extend` for `reqs` (each with prefix_len and extend_end set).

        Returns (out_cache_loc, extend lengths). Raises RuntimeError as SGLang does when
        the pool is short (see `is_out_of_memory`); rows bound before the failure stay
        bound, as in SGLang (the caller rolls back)."""
        import torch
        from sglang.srt.mem_cache.allocation import (
            alloc_paged_token_slots_extend,
            alloc_req_slots,
        )

        sg = self.sg
        rows = sg.req_to_token_pool
        prefix_lens = [r.prefix_len for r in reqs]
        seq_lens = [r.extend_end for r in reqs]
        extend_lens = [s - p for s, p in zip(seq_lens, prefix_lens)]
        prefixes = [self._prefix_indices(r) for r in reqs]
        from_tree = [not r.kv.holds_kv for r in reqs]  # a held row already holds its prefix
        prefix_cpu = torch.tensor(prefix_lens, dtype=torch.int64)
        seq_cpu = torch.tensor(seq_lens, dtype=torch.int64)
        alloc_req_slots(rows, reqs, sg.tree_cache)
        last_loc = torch.tensor(
            [int(t[-1]) if len(t) else -1 for t in prefixes], dtype=torch.int64)
        with stdout_to_stderr():
            out = alloc_paged_token_slots_extend(
                tree_cache=sg.tree_cache, prefix_lens=prefix_cpu, prefix_lens_cpu=prefix_cpu,
                seq_lens=seq_cpu, seq_lens_cpu=seq_cpu, last_loc=last_loc,
                extend_num_tokens=sum(extend_lens),
            )
        table = rows.req_to_token
        offset = 0
        for req, prefix, fresh, pre, seq, n in zip(reqs, prefixes, from_tree, prefix_lens,
                                                   seq_lens, extend_lens):
            row = table[req.kv.req_pool_idx]
            if pre and fresh:
                row[:pre] = prefix
            row[pre:seq] = out[offset : offset + n]
            offset += n
            req.kv.kv_allocated_len = seq
            req.kv.kv_committed_len = seq
            if not req.retracted_stain:  # prepare_for_extend: a hit is counted once per Req
                req.cached_tokens += pre - req.already_computed
                split_tiers(req)  # and split by tier on its first extend
                req.already_computed = seq
            req.is_retracted = False
            sg.tree_cache.maybe_hand_to_session(req)
        return out, extend_lens

    def _prefix_indices(self, req):
        import torch

        if req.kv.holds_kv:
            return self.sg.req_to_token_pool.req_to_token[req.kv.req_pool_idx, : req.prefix_len]
        if req.prefix_len == 0:
            return torch.empty(0, dtype=torch.int64)
        return self.sg.tree_cache.prefix_device_indices(req)

    # ---- decode ------------------------------------------------------------------------

    def decode_demand(self, reqs: list, committed: np.ndarray | None = None) -> int:
        """Tokens the next decode step needs (`new_tokens_required_next_decode`);
        `committed`: the requests' committed lengths, when the caller has them."""
        page = self.page
        if committed is not None:
            return int(np.count_nonzero(committed % page == 0)) * page
        return sum(1 for r in reqs if r.kv.kv_committed_len % page == 0) * page

    def decode_fits(self, reqs: list, committed: np.ndarray | None = None) -> bool:
        """`ScheduleBatch.check_decode_mem`: evicts reclaimable cache, then compares."""
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        return self.sg.allocator.check_decode_capacity(
            num_tokens=self.decode_demand(reqs, committed), tree_cache=self.sg.tree_cache,
            requests=reqs, spec_algorithm=SpeculativeAlgorithm.NONE)

    def decode(self, kvs: list, rows: np.ndarray, committed: np.ndarray) -> None:
        """`alloc_for_decode_default(batch, token_per_req=1)` for the batch's requests, given
        in batch order by their `kv` records, `req_to_token` rows and committed lengths
        (the last advanced by one here, as each record's)."""
        import torch
        from sglang.srt.mem_cache.allocation import alloc_paged_token_slots_decode

        sg = self.sg
        table = sg.req_to_token_pool.req_to_token
        row_t = torch.from_numpy(rows)
        seq = torch.from_numpy(committed)
        last_loc = table[row_t, seq - 1]
        with stdout_to_stderr():
            out = alloc_paged_token_slots_decode(
                tree_cache=sg.tree_cache, seq_lens=seq + 1, seq_lens_cpu=seq + 1,
                last_loc=last_loc, token_per_req=1)
        table[row_t, seq] = out.to(torch.int32)
        committed += 1
        for kv in kvs:
            kv.kv_allocated_len += 1
            kv.kv_committed_len += 1

    def jump_pages(self, committed: np.ndarray, steps: int) -> np.ndarray:
        """Cumulative new pages that `steps` single decode steps would take from committed
        lengths `committed`: element j is the pages taken by steps 1..j (element 0 is 0).

        Step j + 1 (0-based offset j) takes a page for each request whose length c + j is
        a multiple of the page, i.e. whose residue (-c) mod page equals j mod page: one
        count per residue, O(batch + steps), not a (steps x batch) table."""
        page = self.page
        per_residue = np.bincount((-committed) % page, minlength=page)
        per_step = per_residue[np.arange(steps, dtype=np.int64) % page]
        return np.concatenate([[0], np.cumsum(per_step)])

    def decode_many(self, kvs: list, rows: np.ndarray, committed: np.ndarray, steps: int) -> None:
        """`steps` decode tokens per request (given as in `decode`) in one allocator call.
        Only for a span in which the single-step path would make no tree call (the
        caller checked that the pool stays at or above the per-step eviction trigger); the
        pages taken are the same in number, only their ids' assignment to requests differs."""
        import torch

        sg = self.sg
        table = sg.req_to_token_pool.req_to_token
        prefix = torch.from_numpy(committed.copy())
        seq = prefix + steps
        last_loc = table[torch.from_numpy(rows), prefix - 1].to(torch.int64)
        out = sg.allocator.alloc_extend(prefix, prefix, seq, seq, last_loc, steps * len(kvs))
        if out is None:  # the caller's page count said it fits: a bug, not a full pool
            raise RuntimeError("decode jump: the allocator refused pages counted as free")
        columns = torch.from_numpy(committed[:, None] + np.arange(steps, dtype=np.int64))
        table[torch.from_numpy(rows)[:, None], columns] = out.view(len(kvs), steps).to(torch.int32)
        committed += steps
        for kv in kvs:
            kv.kv_allocated_len += steps
            kv.kv_committed_len += steps

    # ---- retraction --------------------------------------------------------------------

    def retract(self, reqs: list) -> tuple[list, list, list]:
        """`ScheduleBatch.retract_decode` over `reqs` (the decode batch, in batch order):
        SGLang's retraction order, `release_req` per victim while the rest does not fit,
        and the last request aborted when even it alone does not fit.

        Returns (retracted, aborted, kept): the first two already released (rows freed,
        unpublished); `kept` in the batch's new order, since SGLang's
        `filter_batch(keep_indices=...)` keeps the survivors in retraction order."""
        from sglang.srt.managers.schedule_batch import ScheduleBatch, release_req

        sg = self.sg
        order = ScheduleBatch._get_decode_retraction_order(reqs)
        retracted, aborted = [], []
        first = True
        while first or not self.decode_fits([reqs[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            req = reqs[order.pop()]
            release_req(req=req, remaing_req_count=len(order), req_to_token_pool=sg.req_to_token_pool,
                        token_to_kv_pool_allocator=sg.allocator, tree_cache=sg.tree_cache,
                        hisparse_coordinator=None)
            retracted.append(req)
        if len(order) <= 1 and not self.decode_fits([reqs[i] for i in order]):
            req = reqs[order.pop()]
            release_req(req=req, remaing_req_count=0, req_to_token_pool=sg.req_to_token_pool,
                        token_to_kv_pool_allocator=sg.allocator, tree_cache=sg.tree_cache,
                        hisparse_coordinator=None, offload_kv=False)
            aborted.append(req)
        if len(order) == len(reqs):  # filter_batch leaves an unfiltered batch as it is
            return retracted, aborted, list(reqs)
        return retracted, aborted, [reqs[i] for i in order]

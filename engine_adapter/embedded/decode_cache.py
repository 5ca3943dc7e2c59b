"""The decode cache: SGLang's per-step decode calls behind one small interface.

`Decode` (decode.py) drives one of two backends. Both make the same calls into SGLang's
tree and allocator, in the same order (tests/integration/test_replay_call_fidelity.py
compares them call by call); they differ only in how the calls are made:

    BatchDecodeCache    through the running `ScheduleBatch` (`st.running_batch`), as
                        SGLang's scheduler does: the oracle, and the path of the tiny
                        model and of a GPU (`EngineConfig.uses_batches`)
    DirectDecodeCache   through `cache_ops.DirectCache` on the batch's columns
                        (batch_view.py): the same helpers, no batch tensors; it alone can
                        allocate several steps at once (a decode jump, jumps.py)

The interface, over the running requests (`st.running`, in batch order):

    fits()           ScheduleBatch.check_decode_mem: evicts reclaimable cache, then says
                     whether one more token per request fits
    retract()        ScheduleBatch.retract_decode: (retracted, aborted, kept), the first two
                     already released, `kept` in the batch's new order
    allocate()       ScheduleBatch.prepare_for_decode: one slot per request; returns
                     (requests, context tokens they read) for the cost model
    append(tokens)   one output token per request and step, step-major:
                     tokens[s * bs + i] is request i's token of step s
    drop_finished()  filter_batch after finished requests left `st.running`
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from engine_adapter.embedded.batch_view import BatchView
from engine_adapter.embedded.cache_ops import DirectCache
from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
from engine_adapter.embedded.state import EngineState


class DecodeCache(Protocol):
    """What `Decode` needs of a backend (module docstring). Each method mutates SGLang's
    tree, allocator and rows and the running `Req`s as the ScheduleBatch method it names."""

    jumps: bool  # whether `jump_pages` / `allocate_many` exist (decode jumps)

    def fits(self) -> bool: ...
    def retract(self) -> tuple[list, list, list]: ...
    def allocate(self) -> tuple[int, int]: ...
    def append(self, tokens: Sequence[int], steps: int = 1) -> None: ...
    def drop_finished(self) -> None: ...


class BatchDecodeCache:
    """The running `ScheduleBatch`'s own methods. Mutates `st.running_batch` (set to None
    when it empties)."""

    jumps = False

    def __init__(self, st: EngineState) -> None:
        self.st = st

    def fits(self) -> bool:
        with stdout_to_stderr():
            return self.st.running_batch.check_decode_mem()

    def retract(self) -> tuple[list, list, list]:
        batch = self.st.running_batch
        with stdout_to_stderr():
            retracted, _ratio, aborted = batch.retract_decode()  # filter_batch inside
        kept = list(batch.reqs)
        if batch.is_empty():
            self.st.running_batch = None
        return retracted, aborted, kept

    def allocate(self) -> tuple[int, int]:
        batch = self.st.running_batch
        with stdout_to_stderr():
            batch.prepare_for_decode()
        return len(batch.reqs), int(batch.seq_lens_cpu.sum())

    def append(self, tokens: Sequence[int], steps: int = 1) -> None:
        """One step's tokens (the batch decodes one step at a time); also the batch's
        `output_ids`, the next step's input."""
        import torch

        batch = self.st.running_batch
        tokens = list(tokens)
        for req, token in zip(batch.reqs, tokens):
            req.output_ids.append(token)
        batch.output_ids = torch.tensor(tokens, dtype=torch.int64, device=batch.device)

    def drop_finished(self) -> None:
        batch = self.st.running_batch
        batch.filter_batch()
        if batch.is_empty():
            self.st.running_batch = None


class DirectDecodeCache:
    """`DirectCache`'s decode calls on the batch view's columns. Mutates the view
    (`st.batch_view`, kept from the batch's changes) besides what DirectCache mutates."""

    jumps = True

    def __init__(self, st: EngineState, cache: DirectCache) -> None:
        self.st = st
        self.cache = cache
        self.page = cache.page
        self.view = st.batch_view = BatchView()

    def batch(self) -> BatchView:
        """The running `Req`s in batch order, with their kv records, output appenders,
        `req_to_token` rows and committed lengths (batch_view.py: applied from the batch's
        changes, not rebuilt); the decode calls keep `committed` in step with each `Req`'s
        `kv_committed_len`."""
        view = self.view
        view.refresh(self.st.running)
        return view

    def fits(self) -> bool:
        view = self.batch()
        return self.cache.decode_fits(view.reqs, view.committed)

    def retract(self) -> tuple[list, list, list]:
        return self.cache.retract(self.batch().reqs)

    def allocate(self) -> tuple[int, int]:
        view = self.batch()
        self.cache.decode(view.kvs, view.rows, view.committed)
        return len(view.reqs), int(view.committed.sum())

    def append(self, tokens: Sequence[int], steps: int = 1) -> None:
        view = self.batch()
        if steps == 1:
            for append, token in zip(view.appends, tokens):
                append(token)
            return
        bs = len(view.reqs)
        for index, req in enumerate(view.reqs):
            req.output_ids.extend(tokens[index::bs])

    def drop_finished(self) -> None:
        """Nothing: the view applies the finishes from `st.running`'s changes."""

    # ---- decode jumps (jumps.py) ---------------------------------------------------------

    def committed(self) -> np.ndarray:
        """The running requests' committed lengths, in batch order (read-only)."""
        return self.batch().committed

    def jump_pages(self, steps: int) -> np.ndarray:
        """See `DirectCache.jump_pages`, from the running requests' committed lengths."""
        return self.cache.jump_pages(self.batch().committed, steps)

    def allocate_many(self, steps: int) -> int:
        """`steps` decode slots per request in one allocator call (a span jumps.py
        qualified: no tree call in it). Returns the batch size."""
        view = self.batch()
        self.cache.decode_many(view.kvs, view.rows, view.committed, steps)
        return len(view.reqs)

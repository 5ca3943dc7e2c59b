"""Times every scheduler step of a real SGLang server and records its shape (step_samples.py),
for `kvctl calibrate` and `kvctl record`. Called from the scheduler thread through hooks.py.

When a step starts and ends (SGLang 0.5.23, `Scheduler.event_loop_normal` / `_overlap`)::

    normal:   ingest | get_next_batch_to_run  run_batch(k)        process_batch_result(k) |
    overlap:  ingest | get_next_batch_to_run  run_batch(k+1)      process_batch_result(k) |
                     ^ start_k (after the receive)           ^ returned   processed ^ end_k

A device that runs the forward inside `run_batch` (the CPU: `synchronous`) is timed as the
scheduler thread's own work for the step, in either loop:

    wall_s = (returned_k - start_k) + (end_k - latest run_batch return before end_k)
              scheduling + forward         result processing

An asynchronous device (CUDA) only launches in `run_batch` and waits for the results in
`process_batch_result`; there the step is the interval between processed steps, from the
round's start after an idle gap (in the overlap loop scheduling k+1 hides behind forward k):

    wall_s = end_k - max(end_(k-1), start_k)

`run_s` is `end_k - launch_k` (SGLang's `batch.launch_ts`) on both. `start_k` is the end of
the last `ingest_requests` before the launch: the scheduling round belongs to the step,
receiving requests does not. kvctl's own per-step work (the tally, a sample when due) runs
after `end_k` is read. The asynchronous formula is SGLang's loop order read from source;
only the synchronous one was measured here (no GPU).

Cost: two `time.monotonic()` calls per loop iteration and one frozen record per step; a
decode step's context is SGLang's own `seq_lens_sum`, or a Python sum over `seq_lens_cpu`
(a torch reduction cost 2-24 us per call in benchmarks/bench_plugin.py; `tolist` about 1).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from engine_adapter.plugin.receipt_log import ReceiptLog
from engine_adapter.step_samples import StepSample, attention_pairs

STEP_CAPACITY = 8192  # samples kept for /step_samples (about 1 MB of JSON when all are read)


def batch_shape(batch: Any) -> tuple[str, int, int, int, int, int, int] | None:
    """(kind, extend, prefill requests, prefix, attention pairs, decode requests, decode
    context) of a `ScheduleBatch` (or its `copy()`); None for a batch that runs no forward
    of requests (idle, prebuilt). A mixed batch holds its decoding requests last, each a
    1-token extend on a prefix of its context (`ScheduleBatch.mix_with_running`)."""
    if not batch.reqs:
        return None
    mode = batch.forward_mode
    if mode.is_decode():
        total = batch.seq_lens_sum
        if total is None:
            lens = batch.seq_lens_cpu
            total = (sum(lens.tolist()) if lens is not None else  # no torch reduction: ~1 us
                     sum(len(r.origin_input_ids) + len(r.output_ids) for r in batch.reqs))
        return "decode", 0, 0, 0, 0, len(batch.reqs), int(total)
    if not mode.is_extend():
        return None
    extend, prefix = list(batch.extend_lens), list(batch.prefix_lens)
    decoding = len(batch.decoding_reqs or ())
    cut = len(extend) - decoding
    prefill_extend, prefill_prefix = extend[:cut], prefix[:cut]
    context = sum(p + 1 for p in prefix[cut:])
    kind = "mixed" if cut and decoding else ("prefill" if cut else "decode")
    return (kind, sum(prefill_extend), cut, sum(prefill_prefix),
            attention_pairs(prefill_extend, prefill_prefix), decoding, context)


class StepTimer:
    """Turns hook calls into `StepSample`s in a numbered ring (`log`, receipt_log.py).
    Mutates only itself. `clock` must be SGLang's clock (`time.monotonic`, which stamps
    `batch.launch_ts`); tests pass a fake one together with fake stamps."""

    def __init__(self, *, synchronous: bool, clock: Callable[[], float] = time.monotonic,
                 capacity: int = STEP_CAPACITY) -> None:
        self.synchronous = synchronous
        self.clock = clock
        self.log = ReceiptLog(capacity)
        self.timer_id = secrets.token_hex(8)  # a reader sees a restart as a new id
        self.started_s = clock()
        self._ingested: float | None = None  # end of the latest receive
        self._ingested_before: float | None = None  # the one before (overlap: step k's)
        self._last_end: float | None = None
        self._returned: dict[int, float] = {}  # forward_iter -> run_batch return (sync)
        self._last_return: float | None = None

    def on_ingested(self) -> None:
        """`Scheduler.ingest_requests` returned: a scheduling round starts now."""
        self._ingested_before = self._ingested
        self._ingested = self.clock()

    def on_run_returned(self, batch: Any) -> None:
        """`Scheduler.run_batch(batch)` returned (used on a synchronous device)."""
        self._last_return = now = self.clock()
        if self.synchronous:
            if len(self._returned) > 64:  # batches never processed (an aborted step)
                self._returned.clear()
            self._returned[getattr(batch, "forward_iter", None)] = now

    def on_processed(self, batch: Any) -> StepSample | None:
        """`Scheduler.process_batch_result(batch)` returned: time it, record it."""
        end = self.clock()
        last_end, self._last_end = self._last_end, end
        returned = self._returned.pop(getattr(batch, "forward_iter", None), None)
        launch = getattr(batch, "launch_ts", None)  # set by SGLang's run_batch
        shape = batch_shape(batch) if launch is not None else None
        if shape is None:
            return None
        start = launch
        ingested = self._ingested
        if ingested is not None and ingested <= launch:
            start = ingested
        elif self._ingested_before is not None and self._ingested_before <= launch:
            start = self._ingested_before
        if returned is not None and self._last_return is not None:  # synchronous device
            wall = (returned - start) + (end - self._last_return)
        else:
            wall = end - (last_end if last_end is not None and last_end > start else start)
        sample = _new_sample(StepSample, (self.log.next_seq, end - self.started_s, wall,
                                          end - launch, *shape))
        self.log.append(sample)
        return sample


_new_sample = tuple.__new__  # StepSample without NamedTuple's keyword-mapping __new__

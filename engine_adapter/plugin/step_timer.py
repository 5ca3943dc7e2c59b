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

Cost (benchmarks/bench_plugin.py: about 3.5 us per step, was 11): one `time.monotonic()`
call per loop iteration (two on a synchronous device, whose `run_batch` return is stamped)
and, per step, one record of raw stamps and references written into a preallocated ring
slot without a lock (step_ring.py). The shape is derived when /step_samples is read, off the
scheduler thread: the record keeps references to the batch's `extend_lens` / `prefix_lens`
lists and, for a decode without `seq_lens_sum`, its `seq_lens_cpu` tensor (one sum). SGLang
rebinds these to new objects for every batch (`prepare_for_extend`, `mix_with_running`,
`prepare_for_decode`: `seq_lens_cpu = seq_lens_cpu + 1`) and never mutates them in place once
a batch ran, so the references read what the step ran. A decode without either is summed
from its requests at once (their `output_ids` grow).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from engine_adapter.plugin.step_ring import StepRing
from engine_adapter.step_samples import StepSample, attention_pairs

STEP_CAPACITY = 8192  # samples kept for /step_samples (about 1 MB of JSON when all are read)


def batch_shape(batch: Any) -> tuple[str, int, int, int, int, int, int] | None:
    """(kind, extend, prefill requests, prefix, attention pairs, decode requests, decode
    context) of a `ScheduleBatch` (or its `copy()`); None for a batch that runs no forward
    of requests (idle, prebuilt). A mixed batch holds its decoding requests last, each a
    1-token extend on a prefix of its context (`ScheduleBatch.mix_with_running`)."""
    raw = capture(batch) if batch.reqs else None
    return None if raw is None else shape_of(*raw)


def capture(batch: Any) -> tuple | None:
    """What `shape_of` needs, by reference (module docstring): (decode requests, context
    total or `seq_lens_cpu`, None) for a decode, (extend_lens, prefix_lens, decoding
    requests) for an extend; None for a batch without a forward of requests."""
    mode = batch.forward_mode
    if mode.is_decode():
        reqs = batch.reqs
        total = batch.seq_lens_sum
        if total is None:
            total = batch.seq_lens_cpu
            if total is None:  # requests change after the step: sum them now
                total = sum(len(r.origin_input_ids) + len(r.output_ids) for r in reqs)
        return len(reqs), total, None
    if mode.is_extend():
        decoding = batch.decoding_reqs
        return batch.extend_lens, batch.prefix_lens, len(decoding) if decoding else 0
    return None


def shape_of(first: Any, second: Any, decoding: int | None) -> tuple:
    """The shape tuple of `batch_shape` from a `capture` (read time, any thread)."""
    if decoding is None:
        total = sum(second.tolist()) if getattr(second, "ndim", 0) else second  # no torch op
        return "decode", 0, 0, 0, 0, first, int(total)
    extend, prefix = list(first), list(second)
    cut = len(extend) - decoding
    prefill_extend, prefill_prefix = extend[:cut], prefix[:cut]
    context = sum(p + 1 for p in prefix[cut:])
    kind = "mixed" if cut and decoding else ("prefill" if cut else "decode")
    return (kind, sum(prefill_extend), cut, sum(prefill_prefix),
            attention_pairs(prefill_extend, prefill_prefix), decoding, context)


class StepTimer:
    """Turns hook calls into step records in a numbered ring (`log`, step_ring.py), read as
    `StepSample`s.
    Mutates only itself. `clock` must be SGLang's clock (`time.monotonic`, which stamps
    `batch.launch_ts`); tests pass a fake one together with fake stamps."""

    def __init__(self, *, synchronous: bool, clock: Callable[[], float] = time.monotonic,
                 capacity: int = STEP_CAPACITY) -> None:
        self.synchronous = synchronous
        self.clock = clock
        self.log = StepRing(capacity, self._sample)
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
        """`Scheduler.run_batch(batch)` returned. Only a synchronous device's steps use it
        (hooks.py calls it only there)."""
        self._last_return = now = self.clock()
        if len(self._returned) > 64:  # batches never processed (an aborted step)
            self._returned.clear()
        self._returned[getattr(batch, "forward_iter", None)] = now

    def on_processed(self, batch: Any) -> bool:
        """`Scheduler.process_batch_result(batch)` returned: time it, record it (True when
        a step was recorded). `capture`, inlined: this runs on every step."""
        end = self.clock()
        last_end, self._last_end = self._last_end, end
        returned = (self._returned.pop(getattr(batch, "forward_iter", None), None)
                    if self.synchronous else None)
        launch = getattr(batch, "launch_ts", None)  # set by SGLang's run_batch
        if launch is None:
            return False
        reqs = batch.reqs
        if not reqs:
            return False
        mode = batch.forward_mode
        if mode.is_decode():
            first, second, decoding = len(reqs), batch.seq_lens_sum, None
            if second is None:
                second = batch.seq_lens_cpu
                if second is None:  # requests change after the step: sum them now
                    second = sum(len(r.origin_input_ids) + len(r.output_ids) for r in reqs)
        elif mode.is_extend():
            first, second, decoding = batch.extend_lens, batch.prefix_lens, batch.decoding_reqs
            decoding = len(decoding) if decoding else 0
        else:
            return False
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
        ring = self.log  # StepRing.write, inlined
        seq = ring.next
        ring.slots[seq % ring.capacity] = (seq, end - self.started_s, wall, end - launch,
                                           first, second, decoding)
        ring.next = seq + 1
        return True

    def _sample(self, record: tuple) -> StepSample:
        """A ring record as the StepSample /step_samples serves (read time)."""
        seq, end_s, wall_s, run_s, first, second, decoding = record
        return StepSample(seq, end_s, wall_s, run_s, *shape_of(first, second, decoding))

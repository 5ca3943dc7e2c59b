"""The decode step log: one clock per decode step, shared by every request.

Every running request decodes exactly one token per decode step, so a request's
inter-token latencies are the gaps between consecutive step clocks while it runs. Instead
of appending a gap to every running request at every step (O(batch) Python per step),
decode.py (on either decode cache) appends one clock per step here and each request keeps
only where its current run started; its gaps are materialized when it leaves the running
set (finish, retraction, abort):

    clocks:    c0   c1   c2   c3   c4   c5   c6
    request r joins after its first token at t, before step 2 (start = 2), finishes at c5:
    r's gaps:  c2 - t,  c3 - c2,  c4 - c3,  c5 - c4        (the same floats, same order)

With `ignore_eos`, no stop strings, no grammar and synthetic ids below the vocabulary
bound, SGLang's `Req.update_finish_state` can finish a request only when its output
reaches `max_new_tokens`, so the step at which a running request finishes is known when
it joins: `start + remaining - 1`. `due(step)` returns the requests finishing at a step;
the caller still asks SGLang's `update_finish_state` for each, so SGLang decides, this
only avoids asking every request every step. An entry is stale when its request left
and re-joined (a retraction), and is skipped.
"""

from __future__ import annotations

import heapq
from array import array

import numpy as np

from engine_adapter.embedded.requests import Tracked


class DecodeLog:
    """Step clocks and finish buckets. Mutates itself and the `Tracked`s it is given."""

    def __init__(self) -> None:
        self.clocks = array("d")
        self._due: dict[int, list[tuple[Tracked, int]]] = {}
        self._steps: list[int] = []  # heap of bucket keys

    @property
    def step(self) -> int:
        """The index the next decode step's clock will take."""
        return len(self.clocks)

    def join(self, tr: Tracked) -> None:
        """`tr` starts (or resumes) decoding with the next step; its first token is out."""
        start = len(self.clocks)
        tr.decode_from = start
        remaining = tr.req.sampling_params.max_new_tokens - len(tr.req.output_ids)
        finish = start + max(remaining, 1) - 1
        bucket = self._due.get(finish)
        if bucket is None:
            self._due[finish] = bucket = []
            heapq.heappush(self._steps, finish)
        bucket.append((tr, start))

    def leave(self, tr: Tracked) -> None:
        """`tr` stops decoding: append the gaps of its current run to `tr.itl`."""
        start = tr.decode_from
        if start is None:
            return
        tr.decode_from = None
        end = len(self.clocks)
        if end <= start:
            return
        run = np.frombuffer(self.clocks, dtype=np.float64)[start:end]
        tr.itl.frombytes(memoryview(np.diff(run, prepend=tr.last_token_s)).cast("B"))  # no floats
        tr.last_token_s = float(run[-1])

    def due(self, step: int, running: dict) -> list[Tracked]:
        """Running requests whose last token is decoded at `step`, in batch order."""
        self._drop_before(step, running)
        entries = self._due.pop(step, None)
        if not entries:
            return []
        if self._steps and self._steps[0] == step:
            heapq.heappop(self._steps)
        live = [tr for tr, start in entries
                if running.get(tr.req.rid) is tr and tr.decode_from == start]
        if len(live) > 1:
            order = {rid: i for i, rid in enumerate(running)}
            live.sort(key=lambda tr: order[tr.req.rid])
        return live

    def next_finish(self, running: dict) -> int | None:
        """The earliest step at which a running request finishes (None: none running)."""
        while self._steps:
            step = self._steps[0]
            if any(running.get(tr.req.rid) is tr and tr.decode_from == start
                   for tr, start in self._due.get(step, ())):
                return step
            heapq.heappop(self._steps)
            self._due.pop(step, None)
        return None

    def _drop_before(self, step: int, running: dict) -> None:
        """Forget buckets of steps before `step`. Each must hold only stale entries: a live
        one is a request whose finishing step was never asked for, so it would decode past
        its budget unnoticed (raises IntegrityError rather than drop it)."""
        while self._steps and self._steps[0] < step:
            past = heapq.heappop(self._steps)
            for tr, start in self._due.pop(past, ()):
                if running.get(tr.req.rid) is tr and tr.decode_from == start:
                    from engine_adapter.base.errors import IntegrityError

                    raise IntegrityError(f"request {tr.req.rid} was due to finish at decode "
                                         f"step {past}, and step {step} came first")

"""Test support for the SGLang plugin (never imported by the product).

`EngineShapedScheduler` is a "scheduler-shaped host": an object with the attribute names
SGLang 0.5.23's `Scheduler` has (tree_cache, token_to_kv_pool_allocator, req_to_token_pool,
running_batch, last_batch, cur_batch_for_debug, chunked_req, waiting_queue, server_args),
whose values are the embedded engine's real SGLang objects and real `Req`s. A real Scheduler
does run on this CPU inside `sglang.launch_server` (tests/e2e/test_e2e_plugin.py,
docs/cpu-server.md), but only behind HTTP; here a test steps the engine itself and calls the
hooks between steps, so the batches are plain holders of the real `Req` lists; everything
the plugin reads through them (cache, pool, Req.kv, Req.lock) is SGLang's own.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch


class _Mode:
    def __init__(self, extend: bool) -> None:
        self._extend = extend

    def is_extend(self) -> bool:
        return self._extend

    def is_decode(self) -> bool:
        return not self._extend


class EngineShapedScheduler:
    def __init__(self, engine) -> None:
        sg = engine.sglang_components()
        self.engine = engine
        self.tree_cache = sg.tree_cache
        self.token_to_kv_pool_allocator = sg.allocator
        self.req_to_token_pool = sg.req_to_token_pool
        self.server_args = sg.server_args
        self.page_size = engine.config.page_size
        self.chunked_req = None
        self.cur_batch_for_debug = None
        self.reqs_by_rid = {}  # every Req seen, to hand finished ones to the tally
        self.refresh()

    def refresh(self) -> None:
        """Mirror the engine's queues after a step (SGLang's Scheduler keeps the same sets)."""
        st = self.engine.internal_state()
        previous = getattr(self, "running_batch", None)
        before = {id(r) for r in previous.reqs} if previous is not None else set()
        self.running_batch = SimpleNamespace(reqs=[t.req for t in st.running.values()])
        self.new_running = [r for r in self.running_batch.reqs if id(r) not in before]
        self.last_batch = SimpleNamespace(reqs=[t.req for t in [*st.partial, *st.reloading]])
        self.waiting_queue = [t.req for t in st.waiting]
        for tracked in st.by_rid.values():
            self.reqs_by_rid[tracked.req.rid] = tracked.req

    def step_batches(self, finished_reqs=()):
        """The batches a Scheduler would have processed this step: an extend batch of the
        requests prefilled in it (still partial, newly running, or finished), a decode batch
        of the running ones."""
        st = self.engine.internal_state()
        extend = [t.req for t in st.partial] + self.new_running + list(finished_reqs)
        decode = [t.req for t in st.running.values()]
        # The fields the step timer reads (ScheduleBatch's names), stamped as run_batch does.
        launched = time.monotonic()
        self.forward_ct = getattr(self, "forward_ct", 0) + 2
        lens = [len(r.origin_input_ids) + len(r.output_ids) for r in decode]
        return (SimpleNamespace(forward_mode=_Mode(True), reqs=extend, launch_ts=launched,
                                forward_iter=self.forward_ct - 1, decoding_reqs=None,
                                extend_lens=[len(r.origin_input_ids) for r in extend],
                                prefix_lens=[int(r.cached_tokens) for r in extend]),
                SimpleNamespace(forward_mode=_Mode(False), reqs=decode, launch_ts=launched,
                                forward_iter=self.forward_ct, seq_lens_sum=None,
                                seq_lens_cpu=torch.tensor(lens, dtype=torch.int64)))

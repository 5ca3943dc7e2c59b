"""Requests are built lazily: a waiting request holds its spec, not an SGLang `Req`, and a
Mooncake prompt stays block ids (`BlockPrompt`) until the engine first examines it.

Real SGLang cache (UnifiedRadixCache, paged allocator) on the shipped trace's head; the
laziness must change no cache call, so the whole report (wall clock aside) must equal the
one from eagerly expanded prompts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.engine import EmbeddedEngine
from engine_adapter.embedded.page_hashes import BlockPrompt
from kvctl.replay.mooncake import iter_records, prompt_tokens, to_spec

pytestmark = pytest.mark.integration

HEAD = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"


def _engine() -> EmbeddedEngine:
    # A small pool and few running requests: a queue builds up behind the head.
    return EmbeddedEngine(EngineConfig(pool_tokens=262_144, page_size=16, max_running_requests=4,
                                       token_budget=8192, max_context_len=131_072))


def test_waiting_requests_hold_no_req_until_admission_examines_them():
    """160 requests arrive at once behind a batch of at most 4. SGLang's fcfs round
    touches the prefixes of the first 128 waiting requests on its refresh rounds
    (schedule_policy.py, WAITING_QUEUE_PREFIX_MATCH_MAX), so those get a `Req` at the
    first round; after two steps the other 28 waiting ones still hold none, and a snapshot
    lists them without building one (its view: the trace line's prompt length, 0
    outputs). Run to the end, every request is built and finishes."""
    engine = _engine()
    records = list(iter_records(HEAD, limit=160))
    for record in records:
        engine.submit(dataclasses.replace(to_spec(record), arrival_s=0.0))
    engine.step()
    engine.step()
    st = engine.internal_state()
    waiting = list(st.waiting)
    assert len(st.running) + len(st.partial) + len(waiting) == 160
    assert all(tr.built for tr in [*st.running.values(), *st.partial])
    touched = 128 - (160 - len(waiting))  # the first round touched 128 of the 160
    assert all(tr.built for tr in waiting[:touched])
    assert not any(tr.built for tr in waiting[touched:]) and len(waiting[touched:]) == 32
    views = {v.rid: v for v in engine.snapshot().requests}
    assert not any(tr.built for tr in waiting[touched:])  # the snapshot built none
    tail = waiting[-1]
    assert tail.spec.rid == records[-1].rid == "mc-160"
    assert (views[tail.spec.rid].state, views[tail.spec.rid].prompt_tokens,
            views[tail.spec.rid].output_tokens) == ("waiting", records[-1].input_length, 0)
    finished = engine.run_until_idle()
    assert sorted(f.rid for f in finished) == sorted(r.rid for r in records)
    assert not st.waiting and not st.by_rid
    engine.check_integrity()


def test_lazy_prompts_give_the_report_of_eager_prompts():
    """The same 150 requests with `BlockPrompt` prompts and with expanded arrays: every
    finished record (outputs, hits, latencies) and the final cache state are identical."""
    runs = []
    for lazy in (True, False):
        engine = _engine()
        for record in iter_records(HEAD, limit=150):
            spec = to_spec(record)
            if not lazy:
                spec = dataclasses.replace(spec, tokens=prompt_tokens(record))
            assert isinstance(spec.tokens, BlockPrompt) == lazy
            engine.submit(spec)
        finished = sorted(engine.run_until_idle(), key=lambda f: f.rid)
        snap = engine.check_integrity()
        runs.append(([(f.rid, f.finish_s, f.hit_tokens, f.ttft_s, f.itl_s.tolist(), f.output_ids.tolist())
                      for f in finished],
                     (snap.ledger.free_tokens, snap.ledger.evictable_tokens, engine.clock_s)))
    assert len(runs[0][0]) == 150
    assert runs[0] == runs[1]

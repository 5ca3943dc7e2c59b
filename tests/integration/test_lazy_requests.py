"""Requests are built lazily: a waiting request holds its spec, not an SGLang `Req`, and a
Mooncake prompt stays block ids (`BlockPrompt`) until the engine first examines it.

Real SGLang cache (UnifiedRadixCache, paged allocator) on the shipped trace's head; the
laziness must change no cache call, so the whole report (wall clock aside) must equal the
one from eagerly expanded prompts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
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
    """After arrivals pile up behind a full batch, every queued request except those the
    admission looked at has no `Req`, and a snapshot (which lists them) builds none."""
    engine = _engine()
    for record in iter_records(HEAD, limit=60):
        engine.submit(dataclasses.replace(to_spec(record), arrival_s=0.0))
    engine.step()
    engine.step()
    st = engine.internal_state()
    waiting = list(st.waiting)
    assert len(waiting) > 40
    assert all(tr.built for tr in st.running.values())
    unbuilt = [tr for tr in waiting if not tr.built]
    assert len(unbuilt) >= len(waiting) - 1  # at most the refused head was matched
    views = {v.rid: v for v in engine.snapshot().requests}
    assert [tr.built for tr in waiting] == [tr.built for tr in st.waiting]
    tail = unbuilt[-1]
    assert views[tail.spec.rid].state == "waiting"
    assert views[tail.spec.rid].prompt_tokens == len(tail.spec.tokens)
    assert views[tail.spec.rid].output_tokens == 0


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
        runs.append(([(f.rid, f.finish_s, f.hit_tokens, f.ttft_s, f.itl_s, f.output_ids.tolist())
                      for f in finished],
                     (snap.ledger.free_tokens, snap.ledger.evictable_tokens, engine.clock_s)))
    assert len(runs[0][0]) == 150
    assert runs[0] == runs[1]


def test_block_prompt_reads_as_its_expanded_tokens():
    """len without expanding; np.asarray, indexing and dtype conversion give the tokens
    `expand_blocks` gives; a repr shows counts, never ids; a length past the blocks fails."""
    prompt = BlockPrompt((7, 3, 9), 1100)
    tokens = prompt_tokens(type("R", (), {"hash_ids": (7, 3, 9), "input_length": 1100})())
    assert len(prompt) == 1100 == len(tokens)
    assert np.array_equal(np.asarray(prompt), tokens)
    assert np.asarray(prompt, dtype=np.int32).dtype == np.int32
    assert prompt[515] == tokens[515] == 3 * 512 + 4
    assert np.array_equal(prompt[:64], tokens[:64])
    assert repr(prompt) == "BlockPrompt(3 blocks, 1100 tokens)"
    with pytest.raises(ValueError):
        BlockPrompt((1, 2), 1025)

"""DecodeLog: shared step clocks, ITL materialized on leave, finish buckets, over real
SGLang `Req`s (the log reads their rid, max_new_tokens and output_ids)."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

from engine_adapter.embedded.decode_log import DecodeLog
from engine_adapter.embedded.requests import RequestSpec, Tracked
from kvctl.errors import IntegrityError

pytestmark = pytest.mark.unit


def tracked(rid: str, max_new: int, out: int = 1, first_s: float = 0.0) -> Tracked:
    """A request built as the engine builds it (engine._arrivals), `out` tokens decoded."""
    from engine_adapter.embedded import sglang_imports

    sglang_imports.load()
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    tokens = np.arange(1, 33, dtype=np.int64)
    sampling = SamplingParams(max_new_tokens=max_new, temperature=0, ignore_eos=True)
    sampling.normalize(None)
    req = Req(rid, "", array("q", tokens.tolist()), sampling, vocab_size=1 << 31,
              eos_token_ids=set())
    req.output_ids.extend(range(1 << 30, (1 << 30) + out))
    spec = RequestSpec(rid=rid, tokens=tokens, max_new_tokens=max_new)
    tr = Tracked(spec=spec, make_req=lambda _: req, namespace_label="ns", key=("ns", 0))
    tr.last_token_s = first_s
    return tr


def test_gaps_are_the_step_clocks_since_joining():
    """Joined before step 2 with its first token at t=1.5: gaps c2-1.5, c3-c2, c4-c3."""
    log = DecodeLog()
    log.clocks.extend([1.0, 1.2])
    tr = tracked("a", max_new=10, first_s=1.5)
    log.join(tr)
    log.clocks.extend([2.0, 2.5, 3.25])
    log.leave(tr)
    assert tr.itl.tolist() == [0.5, 0.5, 0.75] and tr.last_token_s == 3.25 and tr.decode_from is None


def test_due_names_the_step_of_the_last_token_in_batch_order():
    """max_new 4 with 1 token out: 3 more decode steps, the last at step start + 2."""
    log = DecodeLog()
    a, b = tracked("a", max_new=4), tracked("b", max_new=2)
    running = {"b": b, "a": a}  # batch order: b first
    log.join(a)
    log.join(b)
    assert log.next_finish(running) == 0  # b: one more token, at step 0
    assert log.due(0, running) == [b]
    log.clocks.append(0.1)
    running.pop("b")
    assert log.due(1, running) == []
    log.clocks.append(0.2)
    assert log.due(2, running) == [a]


def test_a_request_that_left_and_rejoined_is_due_only_at_its_new_step():
    """A retraction re-joins it later: its old bucket entry is stale and skipped."""
    log = DecodeLog()
    a = tracked("a", max_new=3)
    running = {"a": a}
    log.join(a)  # due at step 1
    log.leave(a)
    log.clocks.append(0.1)
    log.join(a)  # from step 1, 2 more tokens: due at step 2
    assert log.due(1, running) == []
    log.clocks.append(0.2)
    assert log.due(2, running) == [a]


def test_a_live_request_whose_step_was_skipped_is_an_integrity_error():
    """Asking for step 3 while a running request was due at step 1 must not drop it."""
    log = DecodeLog()
    a = tracked("a", max_new=3)
    log.join(a)
    log.clocks.extend([0.1, 0.2, 0.3])
    with pytest.raises(IntegrityError, match="due to finish at decode step 1"):
        log.due(3, {"a": a})

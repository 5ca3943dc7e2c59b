"""One engine step enters each scheduler piece once, in SGLang's order (engine.py `step`).

A `kvctl replay` slice of the shipped trace whose pool evicts and keeps the batch full runs
with the pieces of the step wrapped to record their calls (class-level wraps, so the
engine the runner builds is the one observed). Every step that ran (not an idle return)
must call, in this order and each at most once:

    Prefill.schedule        the prefill round (get_next_batch_to_run)
    JumpPlanner.clocks      whether decode steps may run at once (at most once)
    Decode.prepare /        a decode step, or the jump's allocation (at most one of them)
    Decode.prepare_jump
    Batches.run             the forward and the clock
    Batches.complete        the batch's result
    Admission.after_step    the admission bookkeeping (new_token_ratio, batch_is_full)
    Stalls.after_step       stall handling

and the slice must produce every kind of batch (prefill, decode, plain and merged jumps),
so that the order was seen on each path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRACE = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
            / "conversation_trace.jsonl")
ORDER = ("schedule", "clocks", "prepare", "prepare_jump", "run", "complete", "after_step",
         "stalls")


def test_each_piece_is_entered_once_per_step_in_sglangs_order(monkeypatch):
    """200 requests, pool 150,000 tokens: every step's calls follow ORDER, each once
    (prepare and prepare_jump exclusive), admission bookkeeping and stall handling exactly
    once; prefill, decode, plain-jump and merged-jump batches all occur."""
    from engine_adapter.embedded.admission import Admission
    from engine_adapter.embedded.batches import Batches
    from engine_adapter.embedded.decode import Decode
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.jumps import JumpPlanner
    from engine_adapter.embedded.prefill import Prefill
    from engine_adapter.embedded.stalls import Stalls
    from kvctl.replay import runner

    calls: list[str] = []
    steps: list[tuple[tuple[str, ...], str]] = []  # (calls, batch kind) per step that ran
    kinds: list[str] = []

    def record(owner, method: str, name: str, keep_kind: bool = False) -> None:
        original = getattr(owner, method)

        def wrapped(self, *args, **kwargs):
            calls.append(name)
            result = original(self, *args, **kwargs)
            if keep_kind:
                kinds.append(result.kind + ("+first" if result.first is not None else ""))
            return result

        monkeypatch.setattr(owner, method, wrapped)

    record(Prefill, "schedule", "schedule")
    record(JumpPlanner, "clocks", "clocks")
    record(Decode, "prepare", "prepare")
    record(Decode, "prepare_jump", "prepare_jump")
    record(Batches, "next_batch", "next_batch", keep_kind=True)
    record(Batches, "run", "run")
    record(Batches, "complete", "complete")
    record(Admission, "after_step", "after_step")
    record(Stalls, "after_step", "stalls")
    step = EmbeddedEngine.step

    def one_step(self, **kwargs):
        calls.clear()
        kinds.clear()
        report = step(self, **kwargs)
        if not report.idle:
            steps.append((tuple(c for c in calls if c != "next_batch"), kinds[0]))
        return report

    monkeypatch.setattr(EmbeddedEngine, "step", one_step)
    runner.run(runner.prepare(runner.ReplaySettings(workload=TRACE, limit=200,
                                                    pool_tokens=150_000)))
    seen = {kind for _, kind in steps}
    assert {"prefill", "decode", "jump", "jump+first"} <= seen, seen
    for made, kind in steps:
        assert list(made) == sorted(made, key=ORDER.index), (kind, made)
        assert len(made) == len(set(made)), (kind, made)
        assert not {"prepare", "prepare_jump"} <= set(made), (kind, made)
        assert made.count("after_step") == made.count("stalls") == 1, (kind, made)

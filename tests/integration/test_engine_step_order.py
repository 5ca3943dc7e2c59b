"""One engine step enters SGLang's scheduler pieces in SGLang's own order (engine.py `step`).

The expected order is read from SGLang's source, not written here: the calls of
`Scheduler.event_loop_normal`, `get_next_batch_to_run` and `update_running_batch`
(srt/managers/scheduler.py) in source order, each call to one of the other two replaced by
that function's own calls. Today that gives

    get_new_batch_prefill       the prefill round                 Prefill.schedule
    retract_decode | decay_step new_token_ratio set or decayed    Admission.before_decode
    prepare_for_decode          the decode step's slots           DecodeCache.allocate(_many)
    run_batch                   the forward                       Batches.run
    process_batch_result        the result                        Batches.complete

(right: the kvctl piece standing for each). A `kvctl replay` slice of the shipped trace
whose pool evicts and keeps the batch full runs with those pieces wrapped to record their
calls (class-level wraps, so the engine the runner builds is the one observed). In every
step that ran (not an idle return) the recorded pieces follow SGLang's order, each at most
once, and admission's after-step bookkeeping and stall handling come once, after the
result; the slice produces every kind of batch (prefill, decode, plain and merged jumps).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRACE = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
            / "conversation_trace.jsonl")
INLINED = ("get_next_batch_to_run", "update_running_batch")
# SGLang's call -> the piece it is; the two ratio updates are alternatives of one piece
PIECES = {"get_new_batch_prefill": "prefill round", "retract_decode": "ratio",
          "decay_step": "ratio", "prepare_for_decode": "decode slots",
          "run_batch": "forward", "process_batch_result": "result"}


def _calls(function) -> list[str]:
    """The names a function calls (`f()`, `x.f()`), in source order, first occurrence."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    calls = sorted((node.lineno, node.col_offset, node.func.attr if isinstance(
        node.func, ast.Attribute) else node.func.id)
        for node in ast.walk(tree) if isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Attribute, ast.Name)))
    names: list[str] = []
    for _, _, name in calls:
        if name not in names:
            names.append(name)
    return names


def sglang_order() -> list[str]:
    """SGLang's pieces in the order its normal event loop reaches them."""
    from sglang.srt.managers.scheduler import Scheduler

    def expand(name: str) -> list[str]:
        out = []
        for call in _calls(getattr(Scheduler, name)):
            out += expand(call) if call in INLINED else [call]
        return out

    order: list[str] = []
    for call in expand("event_loop_normal"):
        if call in PIECES and PIECES[call] not in order:
            order.append(PIECES[call])
    return order


def test_sglangs_order_is_read_from_its_source():
    """The source names every piece (a call renamed in SGLang fails here, not silently
    below), a decode's ratio update before its slots, its slots before the forward."""
    order = sglang_order()
    assert sorted(order) == sorted(set(PIECES.values())), order
    assert order.index("ratio") < order.index("decode slots") < order.index("forward")


def test_each_piece_is_entered_once_per_step_in_sglangs_order(monkeypatch):
    """200 requests, pool 150,000 tokens: every step's pieces follow sglang_order(), each
    at most once (one decode-slot call: a step or a jump), a decode's ratio update before
    its slots; admission's after-step bookkeeping and stall handling exactly once, after
    the result; prefill, decode, plain-jump and merged-jump batches all occur."""
    from engine_adapter.embedded.admission import Admission
    from engine_adapter.embedded.batches import Batches
    from engine_adapter.embedded.decode_cache import DirectDecodeCache
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.prefill import Prefill
    from engine_adapter.embedded.stalls import Stalls
    from kvctl.replay import runner

    order = sglang_order()
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

    record(Prefill, "schedule", "prefill round")
    record(Admission, "before_decode", "ratio")
    record(DirectDecodeCache, "allocate", "decode slots")
    record(DirectDecodeCache, "allocate_many", "decode slots")
    record(Batches, "run", "forward")
    record(Batches, "complete", "result")
    record(Batches, "next_batch", "next_batch", keep_kind=True)
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
        pieces = [c for c in made if c in order]
        assert pieces == sorted(pieces, key=order.index), (kind, made, order)
        assert len(pieces) == len(set(pieces)), (kind, made)
        assert list(made[len(pieces):]) == ["after_step", "stalls"], (kind, made)
        if kind != "prefill":  # a decode step or a jump: its ratio, then its slots
            assert {"ratio", "decode slots", "forward"} <= set(pieces), (kind, made)

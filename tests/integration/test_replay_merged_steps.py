"""A prefill round's decode step merged into the decode jump after it changes no result.

`kvctl replay` lets the engine run the decode step that follows a prefill round which
admitted nothing as the first step of the jump after it (engine_adapter/embedded/jumps.py),
when the runner would not sample that step (`_Loop.can_merge`). The merged report carries
the step's end state (`StepReport.first`), so the per-step peaks and time-weighted means
(kvctl/replay/peaks.py) and the timeline see it as if it had been reported alone. Checked
here against the same replay with merging refused, on a slice of the shipped trace whose
pool keeps the batch full (so merges happen).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRACE = str(Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake"
            / "conversation_trace.jsonl")


def replay(monkeypatch, *, merge: bool) -> tuple[dict, tuple, int]:
    """(report without wall_clock, timeline rows, reports that carried a merged step)."""
    from engine_adapter.embedded.engine import EmbeddedEngine
    from kvctl.replay import runner

    merged = [0]
    step = EmbeddedEngine.step

    def counting(self, **kwargs):
        report = step(self, **kwargs)
        merged[0] += report.first is not None
        return report

    with monkeypatch.context() as patch:
        patch.setattr(EmbeddedEngine, "step", counting)
        if not merge:
            patch.setattr(runner._Loop, "can_merge", lambda self, before_s, after_s: False)
        result = runner.run(runner.prepare(runner.ReplaySettings(
            workload=TRACE, limit=300, pool_tokens=150_000)))
    doc = result.report.to_dict()
    doc.pop("wall_clock")
    return doc, result.timeline, merged[0]


def test_merged_steps_leave_the_report_and_the_timeline_unchanged(monkeypatch):
    """300 requests, pool 150,000 tokens: with merged steps (137 here) the report (hit
    tokens, peaks, time-weighted means, latencies, steps) and every timeline row equal
    those of the same replay with merging refused (0 merged)."""
    doc, timeline, merged = replay(monkeypatch, merge=True)
    doc_off, timeline_off, merged_off = replay(monkeypatch, merge=False)
    assert (merged, merged_off) == (137, 0)
    assert doc["evictions"] > 0 and doc["mean_kv_utilization"] > 0
    assert doc == doc_off
    assert timeline == timeline_off

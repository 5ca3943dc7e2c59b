"""The content oracle's page chains change its cost, never its answers: proof on real replays.

Every `ContentOracle.lengths` / `record` call the engine makes during a replay is also put,
with the same arguments less the request's `PageChain`, to `ReferenceOracle` (the previous
algorithm: hash every token on every call; tests/support/reference_oracle.py) sharing the
engine oracle's hash base. Compared:

- every admission's (S_any, S_ns, S_sem), call by call;
- the remembered state at the end: the two hash sets per (namespace, generation) are equal.

Workloads: the shipped trace head (block-id chains; a bounded pool so that requests are
retracted and refill with output tokens) at page 16, the same at page 1024 (no page divides
a 512-token block: token fallback), and every shipped scenario (multi-turn sessions,
namespaces, generations: token fallback plus output pages).
"""

from __future__ import annotations

import math

from pathlib import Path

import pytest

from tests.support.reference_oracle import ReferenceOracle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PAGES_HEAD_150 = 130_941  # pages the first 150 requests of head_500 leave, unbounded pool
HEAD = str(ROOT / "examples" / "traces" / "mooncake" / "head_500.jsonl")
SCENARIOS = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))


class Shadow:
    """Wraps the engine oracle's two calls; runs the reference beside each."""

    def __init__(self) -> None:
        self.admissions: list[tuple[tuple[int, int, int], tuple[int, int, int]]] = []
        self.records = 0
        self.chained = 0  # calls that came with a PageChain (the engine's path)
        self.reference: ReferenceOracle | None = None
        self.oracle = None

    def attach(self, monkeypatch) -> Shadow:
        from engine_adapter.embedded.oracle import ContentOracle

        lengths, record = ContentOracle.lengths, ContentOracle.record
        shadow = self

        def ref(oracle) -> ReferenceOracle:
            if shadow.oracle is not oracle:
                shadow.oracle = oracle
                shadow.reference = ReferenceOracle(oracle.page_size, int(oracle._hasher.base))
            return shadow.reference

        def wrapped_lengths(oracle, key, tokens, cap, chain=None):
            got = lengths(oracle, key, tokens, cap, chain=chain)
            shadow.chained += chain is not None
            shadow.admissions.append((got, ref(oracle).lengths(key, tokens, cap)))
            return got

        def wrapped_record(oracle, key, tokens, upto, known=0, chain=None):
            record(oracle, key, tokens, upto, known=known, chain=chain)
            shadow.chained += chain is not None
            shadow.records += 1
            ref(oracle).record(key, tokens, upto, known=known)

        monkeypatch.setattr(ContentOracle, "lengths", wrapped_lengths)
        monkeypatch.setattr(ContentOracle, "record", wrapped_record)
        return self


def replay(workload: str, **settings) -> dict:
    from kvctl.replay.runner import ReplaySettings, run_replay

    return run_replay(ReplaySettings(workload=workload, **settings)).report.to_dict()


def check(shadow: Shadow) -> None:
    assert shadow.admissions and shadow.records
    assert shadow.chained == len(shadow.admissions) + shadow.records
    differing = [i for i, (got, want) in enumerate(shadow.admissions) if got != want]
    assert differing == [], f"{len(differing)} differ, first {shadow.admissions[differing[0]]}"
    assert shadow.oracle.remembered() == shadow.reference._seen


@pytest.mark.parametrize("page_size", [16, 1024])
def test_trace_head_admissions_equal_the_reference(sglang_ready, monkeypatch, page_size):
    """Head of the shipped trace at a bounded pool (at page 16 it retracts): every
    admission's lengths and the final remembered hash sets equal the per-token reference's.
    SGLang's PrefillAdder reserves each running request's outputs up to
    SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (4,096), which these outputs never exceed; the
    test runs it at 64, as a server started with that variable would, so admission is
    optimistic and decode retracts (re-admissions then carry output tokens)."""
    from sglang.srt.managers import schedule_policy

    monkeypatch.setattr(schedule_policy, "CLIP_MAX_NEW_TOKENS", 64)
    shadow = Shadow().attach(monkeypatch)
    doc = replay(HEAD, limit=150, pool_tokens=130_000, page_size=page_size)
    check(shadow)
    if page_size == 16:
        assert doc["retractions"] > 0  # refills with output tokens were exercised
    assert any(s > 0 for pair in shadow.admissions for s in pair[0])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_admissions_equal_the_reference(sglang_ready, monkeypatch, scenario):
    """Each shipped scenario: every admission's lengths and the final hash sets equal the
    reference's (prompts built from tokens, later turns carrying earlier outputs)."""
    shadow = Shadow().attach(monkeypatch)
    replay(str(scenario), limit=40)
    check(shadow)


def test_trace_hint_sizes_the_oracle_once(sglang_ready, monkeypatch):
    """A Mooncake replay sizes the oracle's set from TraceSummary.oracle_pages: the first
    150 requests of head_500 (bound 133,747 pages) remember 130,941 pages, and the set is
    never rehashed (one table allocation: its first)."""
    from engine_adapter.embedded.hash_set import MAX_LOAD, WIDTH, HashSet

    sizes: list[int] = []
    resize = HashSet._resize

    def counted(self, buckets):
        sizes.append(buckets)
        resize(self, buckets)

    monkeypatch.setattr(HashSet, "_resize", counted)
    shadow = Shadow().attach(monkeypatch)
    replay(HEAD, limit=150, pool_tokens=0)
    pages = shadow.oracle.remembered_pages
    assert pages == PAGES_HEAD_150 <= 133_747
    assert len(shadow.oracle._seen) == 1
    assert sizes == [math.ceil(133_747 / (WIDTH * MAX_LOAD))]

"""Requests SGLang would refuse are refused by the replay the same way, and it goes on.

The door (engine_adapter/embedded/door.py) is SGLang 0.5.23's: the tokenizer manager's
context checks, the scheduler's max_new_tokens clip (`init_req_max_new_tokens`, through the
allocator's `max_new_tokens_for_memory`) and `validate_input_length` against
max_req_input_len = min(context - 1, pool - 1) - 5.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HEAD_500 = str(ROOT / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def run_engine(requests: list[tuple[str, int, int]]):
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    engine = EmbeddedEngine(EngineConfig(pool_tokens=256, page_size=16, max_context_len=1024))
    start = 1
    for index, (rid, prompt, max_new) in enumerate(requests):
        tokens = np.arange(start, start + prompt, dtype=np.int64)
        start += prompt
        engine.submit(RequestSpec(rid=rid, tokens=tokens, max_new_tokens=max_new,
                                  arrival_s=float(index)))
    records = {r.rid: r for r in engine.run_until_idle()}
    engine.check_integrity()
    return engine, records


def test_requests_sglang_refuses_are_listed_with_its_reasons_and_the_rest_run():
    """Pool 256 (max input 250), context 1,024: a 300-token prompt is over the pool's
    input limit, a 1,100-token one over the context; the requests around them finish."""
    engine, records = run_engine([("ok0", 100, 4), ("pool", 300, 4), ("ctx", 1100, 4),
                                  ("ok1", 100, 4)])
    assert [(r.rid, r.rejected) for r in engine.rejections()] == [
        ("pool", "Input length (300 tokens) exceeds the maximum allowed length (250 tokens). "
                 "Use a shorter input or enable --allow-auto-truncate."),
        ("ctx", "The input (1100 tokens) is longer than the model's context length "
                "(1024 tokens)."),
    ]
    assert [len(records[rid].output_ids) for rid in ("ok0", "ok1")] == [4, 4]
    assert records["pool"].output_ids.size == 0 and records["pool"].hit_tokens == 0
    assert engine.snapshot().counters.requests_finished == 2


def test_max_new_tokens_is_clipped_to_what_an_empty_pool_holds():
    """200 prompt tokens asking 100 outputs in a 256-token pool: SGLang clips to
    min(100, 255 - 200 - 1 = 54) and then to 256 - 208 - 16 - 1 = 31 outputs."""
    engine, records = run_engine([("long", 200, 100)])
    assert engine.rejections() == ()
    assert len(records["long"].output_ids) == 31


def test_replay_lists_rejected_requests_and_finishes(tmp_path):
    """`kvctl replay --pool-tokens 20000` over head_500's first 10 lines: the prompts of
    lines 8 and 9 (23,141 and 26,888 tokens) exceed max_req_input_len = 19,994, so both
    are rejected (exit 0, listed in --json, in arrival order); the other 8 run."""
    from typer.testing import CliRunner

    from kvctl.cli.app import app

    result = CliRunner().invoke(app, ["replay", HEAD_500, "--limit", "10", "--pool-tokens",
                                      "20000", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["requests"] == 8
    assert doc["rejected"]["requests"] == 2
    assert [(e["rid"], e["prompt_tokens"], e["reason"]) for e in doc["rejected"]["list"]] == [
        (rid, tokens, f"Input length ({tokens} tokens) exceeds the maximum allowed length "
                      "(19994 tokens). Use a shorter input or enable --allow-auto-truncate.")
        for rid, tokens in (("mc-7", 23_141), ("mc-8", 26_888))]

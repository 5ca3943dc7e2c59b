"""`kvctl replay` reads a recording's block size (and page size) from its sidecar.

Tiny hand-written traces with a `NAME.meta.json` beside them, replayed through the real
embedded engine (SGLang's radix cache) with Typer's CliRunner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration


def write_trace(tmp_path: Path, rows: list[dict], meta: dict | str | None) -> Path:
    trace = tmp_path / "rec.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if meta is not None:
        text = meta if isinstance(meta, str) else json.dumps(meta)
        (tmp_path / "rec.meta.json").write_text(text)
    return trace


FOUR = [  # 4-token blocks: the second request shares the first's first two blocks (8 tokens)
    {"timestamp": 0, "input_length": 12, "output_length": 2, "hash_ids": [0, 1, 2]},
    {"timestamp": 500, "input_length": 10, "output_length": 2, "hash_ids": [0, 1, 3]},
]


def replay(trace: Path, *args: str):
    return CliRunner().invoke(app, ["replay", str(trace), "--pool-tokens", "0", *args])


def test_a_four_token_block_recording_replays_its_sharing_at_its_page_size(tmp_path):
    """block_tokens 4 and page_size 4 in the sidecar: the replay runs at page 4 (no
    --page-size given) and finds the 8 shared tokens as hits."""
    trace = write_trace(tmp_path, FOUR, {"block_tokens": 4, "page_size": 4})
    result = replay(trace, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["settings"]["page_size"] == 4
    assert (doc["requests"], doc["prompt_tokens"], doc["hit_tokens"]) == (2, 22, 8)


def test_a_page_that_straddles_blocks_is_one_line_naming_the_fix(tmp_path):
    """4-token blocks replayed at --page-size 6 (neither divides the other): exit 2, one
    line naming the sidecar and a page size that works."""
    trace = write_trace(tmp_path, FOUR, {"block_tokens": 4, "page_size": 4})
    result = replay(trace, "--page-size", "6")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "kvctl: error: rec.jsonl: rec.meta.json says 4-token blocks, which pages of 6 tokens "
        "would straddle: give a --page-size that divides 4 (e.g. 4) or is a multiple of it")


def test_pages_larger_than_the_blocks_share_whole_pages_only(tmp_path):
    """The same recording at --page-size 8 (a what-if with larger pages): the second request
    shares one whole 8-token page of the first, and its 10-token prompt can use 8 of them
    (SGLang matches at most input - 1 = 9 tokens, one page)."""
    trace = write_trace(tmp_path, FOUR, {"block_tokens": 4, "page_size": 4})
    result = replay(trace, "--page-size", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["hit_tokens"] == 8


@pytest.mark.parametrize("meta, expected", [
    ({"block_tokens": 0}, "rec.meta.json: block_tokens must be a positive integer, got 0"),
    ({"block_tokens": "4"}, "rec.meta.json: block_tokens must be a positive integer, got '4'"),
    ("{not json", "rec.meta.json: not valid JSON (Expecting property name enclosed in double "
                  "quotes)"),
])
def test_a_bad_sidecar_is_one_line_and_exit_2(tmp_path, meta, expected):
    """A sidecar kvctl cannot use stops the replay before any engine: exit 2, one line."""
    trace = write_trace(tmp_path, FOUR, meta)
    result = replay(trace)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(expected)


def test_without_a_sidecar_blocks_are_mooncakes_512(tmp_path):
    """No sidecar: 512-token blocks, so the 4-token-block trace is malformed (line 1)."""
    trace = write_trace(tmp_path, FOUR, None)
    result = replay(trace)
    assert result.exit_code == 2
    assert "rec.jsonl:1: input_length 12 spans 1 blocks of 512 but hash_ids has 3" in result.stderr

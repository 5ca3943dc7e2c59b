"""Mooncake JSONL parsing, validation and hash-block expansion (kvctl.replay.mooncake)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvctl.errors import InputError
from kvctl.replay.mooncake import (
    MAX_HASH_ID,
    MooncakeRecord,
    iter_records,
    parse_line,
    prompt_tokens,
    scan_trace,
    to_spec,
)

pytestmark = pytest.mark.unit

HEAD_500 = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"


def record(hash_ids, input_length, output_length=1, line=1, arrival_s=0.0) -> MooncakeRecord:
    return MooncakeRecord(line=line, arrival_s=arrival_s, input_length=input_length,
                          output_length=output_length, hash_ids=tuple(hash_ids))


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_hash_id_expands_to_its_own_block_of_512_ids():
    """Block b is the ids 1 + 512 b ... 512 + 512 b; the last block is cut at input_length."""
    tokens = prompt_tokens(record([0, 3], input_length=600))
    assert len(tokens) == 600
    assert tokens[:512].tolist() == list(range(1, 513))
    assert tokens[512:].tolist() == list(range(1 + 3 * 512, 1 + 3 * 512 + 88))


def test_equal_leading_ids_share_a_prefix_and_diverge_at_the_first_different_id():
    """[7, 8, 9] and [7, 8, 10] agree on exactly 1,024 tokens and share no id after that."""
    first = prompt_tokens(record([7, 8, 9], input_length=1536))
    second = prompt_tokens(record([7, 8, 10], input_length=1536))
    same = np.flatnonzero(first != second)
    assert same[0] == 1024
    assert not set(first[1024:].tolist()) & set(second[1024:].tolist())


def test_largest_hash_id_stays_below_the_engines_output_id_range():
    """Prompt ids stay below 2^30, where the engine's synthetic output ids begin; none is 0."""
    tokens = prompt_tokens(record([MAX_HASH_ID, 0], input_length=1024))
    assert MAX_HASH_ID == 2_097_150
    assert tokens.max() == 512 * (MAX_HASH_ID + 1) == 1_073_741_312
    assert tokens.max() < (1 << 30)
    assert tokens.min() >= 1


def test_hash_id_beyond_the_id_space_names_the_line():
    """An id whose block would reach 2^30 is rejected with the file and line."""
    text = f'{{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [{MAX_HASH_ID + 1}]}}'
    with pytest.raises(InputError, match=r"t\.jsonl:4: hash_ids must be a list of integers in \[0, 2097150\]"):
        parse_line(text, path="t.jsonl", line=4)


def test_arrival_is_the_timestamp_in_seconds():
    """timestamp 27482 ms arrives at 27.482 s on the virtual clock."""
    parsed = parse_line('{"timestamp": 27482, "input_length": 513, "output_length": 52, '
                        '"hash_ids": [46, 47]}', path="t", line=1)
    assert parsed.arrival_s == 27.482
    assert to_spec(parsed).arrival_s == 27.482
    assert to_spec(parsed).max_new_tokens == 52


def test_malformed_json_names_file_and_line(tmp_path):
    """A broken third line fails with '<path>:3: not valid JSON'."""
    ok = '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}'
    path = write(tmp_path, ok, ok, '{"timestamp": 0, "input_length": ')
    with pytest.raises(InputError, match=rf"^{tmp_path}/trace\.jsonl:3: not valid JSON"):
        list(iter_records(path))


def test_missing_field_is_named(tmp_path):
    """A line without output_length says which field is missing."""
    path = write(tmp_path, '{"timestamp": 0, "input_length": 5, "hash_ids": [0]}')
    with pytest.raises(InputError, match=r"trace\.jsonl:1: missing field\(s\) output_length"):
        list(iter_records(path))


def test_block_count_must_match_input_length():
    """1,025 tokens span 3 blocks of 512; two hash ids is an error."""
    with pytest.raises(InputError, match="input_length 1025 spans 3 blocks of 512 but hash_ids has 2"):
        parse_line('{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}',
                   path="t", line=1)


def test_non_positive_lengths_are_rejected():
    """output_length 0 is not a request the engine can run."""
    with pytest.raises(InputError, match="output_length must be a positive integer, got 0"):
        parse_line('{"timestamp": 0, "input_length": 5, "output_length": 0, "hash_ids": [1]}',
                   path="t", line=1)


def test_timestamps_must_not_go_backwards(tmp_path):
    """Lazy submission needs sorted arrivals; the second line going back is named."""
    path = write(tmp_path,
                 '{"timestamp": 10, "input_length": 5, "output_length": 1, "hash_ids": [0]}',
                 '{"timestamp": 9, "input_length": 5, "output_length": 1, "hash_ids": [1]}')
    with pytest.raises(InputError, match=r"trace\.jsonl:2: timestamp goes backwards"):
        list(iter_records(path))


def test_blank_lines_are_skipped_but_counted(tmp_path):
    """Line numbers are the file's: a record after a blank line is line 3."""
    ok = '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}'
    path = write(tmp_path, ok, "", ok)
    assert [r.line for r in iter_records(path)] == [1, 3]


def test_limit_stops_after_n_records():
    """--limit 7 yields the first seven lines."""
    assert [r.line for r in iter_records(HEAD_500, limit=7)] == [1, 2, 3, 4, 5, 6, 7]


def test_scan_totals_the_shipped_head_500():
    """head_500.jsonl: 500 requests, 7,124,855 prompt and 180,942 output tokens, the longest
    121,912 tokens, the last arrival at 165 s."""
    summary = scan_trace(HEAD_500)
    assert (summary.requests, summary.prompt_tokens, summary.output_tokens) == (500, 7_124_855, 180_942)
    assert summary.max_request_tokens == 121_912
    assert summary.last_arrival_s == 165.0


def test_demand_rounds_every_request_up_to_pages(tmp_path):
    """110 + 18 tokens at page 16 need 7 + 2 pages = 144 slots (bounded by P - 1 per request)."""
    path = write(tmp_path,
                 '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0]}',
                 '{"timestamp": 0, "input_length": 17, "output_length": 1, "hash_ids": [1]}')
    assert scan_trace(path).demand_tokens(16) == 144


def test_empty_trace_is_an_input_error(tmp_path):
    """A file with no requests cannot be replayed."""
    path = write(tmp_path, "")
    with pytest.raises(InputError, match="holds no requests"):
        scan_trace(path)


def test_oracle_pages_bounds_what_two_requests_can_leave(tmp_path):
    """[0, 1] with 600 + 10 tokens and [0] with 512 + 3, page 16: 2 distinct blocks x 32
    pages + (13 output + 2 x 16) // 16 = 66, under every request's own 38 + 32 + 2 = 72.
    What the oracle can remember is 38 pages (610 // 16; the second request's 32 prompt
    pages are the first's, and 515 tokens fill no 33rd page)."""
    path = write(tmp_path,
                 '{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}',
                 '{"timestamp": 0, "input_length": 512, "output_length": 3, "hash_ids": [0]}')
    summary = scan_trace(path)
    assert summary.distinct_blocks == 2
    assert summary.oracle_pages(16) == 66


def test_oracle_pages_of_the_shipped_trace():
    """The figure TraceSummary.oracle_pages cites: 182,790 distinct hash ids in the hour."""
    full = HEAD_500.parent / "conversation_trace.jsonl"
    summary = scan_trace(full)
    assert summary.distinct_blocks == 182_790
    assert summary.oracle_pages(16) == 6_118_939

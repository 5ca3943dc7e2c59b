"""`kvctl replay TRACE --against URL` on the real CPU server (tests/e2e/sglang_server.py).

Requests spaced 3 s apart are served one at a time, where the replay is exact: every
request's predicted hit tokens equal SGLang's own `cached_tokens`, and a request longer
than the server's context is refused by the server and by the twin's rule alike.
"""

from __future__ import annotations

import json

import pytest

from e2e.kvctl_cli import kvctl

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# 16-token blocks (the sidecar says so; the server's page is 4). Line 2 shares line 1's
# first 6 blocks (96 tokens), line 4 its first 3 (48), line 5 repeats line 1 (SGLang
# matches at most input - 1 = 99 tokens: 24 pages, 96), line 3 exceeds the 512-token
# context, line 6 shares nothing.
ROWS = [
    (0, 100, list(range(0, 7))),
    (3000, 120, [0, 1, 2, 3, 4, 5, 7, 8]),
    (6000, 600, list(range(20, 58))),
    (9000, 50, [0, 1, 2, 9]),
    (12000, 100, list(range(0, 7))),
    (15000, 200, list(range(60, 73))),
]


def test_against_the_real_server_one_at_a_time_predicts_every_requests_hits(server,
                                                                           tmp_path):
    """Measured and predicted blocks both: 5 served, 1 rejected, 240 hit tokens of 570;
    every served request's hit tokens equal; evictions read from /metrics (0 here)."""
    trace = tmp_path / "twin.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 4,
                                         "hash_ids": ids}) + "\n" for t, n, ids in ROWS))
    (tmp_path / "twin.meta.json").write_text(json.dumps({"block_tokens": 16}))
    done = kvctl("replay", str(trace), "--against", server.url, "--json", timeout_s=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    for block in ("measured", "predicted"):
        figures = doc[block]
        assert (figures["served"], figures["rejected"]) == (5, 1), block
        assert (figures["prompt_tokens"], figures["hit_tokens"]) == (570, 240), block
        assert figures["hit_rate"] == 240 / 570 and figures["ttft_p50_s"] > 0, block
        assert figures["ttft_p99_s"] >= figures["ttft_p50_s"], block
        assert figures["evicted_tokens"] == 0, block
    assert doc["agreement"]["hit_tokens_equal_share"] == 1.0
    assert [r["line"] for r in doc["rejected"]["measured"]] == [3]
    assert doc["rejected"]["predicted"] == [
        {"line": 3, "reason": "input 600 >= context length 512"}]
    assert doc["replay_options"]["page_size"] == 4

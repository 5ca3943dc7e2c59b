"""`kvctl inspect --url` against a real `sglang.launch_server` (tests/e2e/sglang_server.py).

Expected values come from the server's own answers (`/server_info`, `/generate`'s
`cached_tokens`) and from page arithmetic at page size 4: a finished request with
`max_new_tokens=1` leaves its prompt's full pages in the radix tree (the one output token
has no K/V yet), so a 24-token prompt leaves 6 pages.
"""

from __future__ import annotations

import pytest

from e2e.kvctl_cli import kvctl_json, shared_prefix_prompts
from e2e.sglang_server import PAGE, POOL_TOKENS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PREFIX, SUFFIX, COUNT = 4 * PAGE, 2 * PAGE, 3


def test_inspect_reads_pool_metrics_and_server_info(server):
    """Pool, page size and version are the server's; the KV-event endpoint is discovered
    from /server_info. (free + evictable + used = pool is not checked here: SGLang computes
    its used gauge as exactly that difference, so it could not fail.)"""
    info = server.server_info()
    doc = kvctl_json("inspect", "--url", server.url)
    ledger, engine = doc["snapshot"]["ledger"], doc["snapshot"]["info"]
    assert doc["connected"] is True and doc["last_error"] is None
    assert ledger["pool_tokens"] == info["max_total_num_tokens"] == POOL_TOKENS
    assert ledger["page_size"] == info["page_size"] == PAGE
    assert engine["sglang_version"] == info["version"] == "0.5.23"
    assert doc["stream"]["endpoint"] == server.events_endpoint
    assert doc["stream"]["failure"] is None and doc["stream"]["malformed_messages"] == 0


def test_inspect_mirrors_shared_prefix_requests(server):
    """Three prompts sharing a 4-page prefix: SGLang reports 16 cached tokens for the second
    and third, and the mirror holds 4 + 3 x 2 pages with one 3-way branch after the prefix.
    The mirror (built from KV events alone) reconciles with SGLang's pool gauges, a second,
    independent source: evictable <= mirror slots <= evictable + used, drift 0."""
    replies = [server.generate(ids) for ids in shared_prefix_prompts(PREFIX, SUFFIX, COUNT)]
    assert [r["meta_info"]["cached_tokens"] for r in replies] == [0, PREFIX, PREFIX]
    doc = kvctl_json("inspect", "--url", server.url)
    mirror, rec = doc["mirror"], doc["reconciliation"]
    pages = PREFIX // PAGE + COUNT * SUFFIX // PAGE
    assert (mirror["blocks"], mirror["tokens_by_medium"]) == (pages, [["GPU", pages * PAGE]])
    assert (mirror["leaves"], mirror["max_fan_out"], mirror["orphans"]) == (COUNT, COUNT, 0)
    assert mirror["max_shared_prefix_tokens"] == PREFIX
    assert mirror["max_depth_tokens"] == PREFIX + SUFFIX
    assert (rec["mirror_blocks"], rec["mirror_slots"]) == (pages, pages * PAGE)
    assert rec["lower_tokens"] <= pages * PAGE <= rec["upper_tokens"], rec
    assert rec["drift_tokens"] == 0 and rec["within_tolerance"] is True


def test_mirror_equals_what_flush_cache_clears(server):
    """The mirror holds exactly the pages the requests left; after SGLang's /flush_cache it
    is empty (one clear received), and the server indeed kept nothing: the same prompt
    then hits 0 cached tokens."""
    prompts = shared_prefix_prompts(PREFIX, SUFFIX, 2, base=300)
    for ids in prompts:
        server.generate(ids)
    before = kvctl_json("inspect", "--url", server.url)
    assert before["mirror"]["blocks"] == (PREFIX + 2 * SUFFIX) // PAGE
    assert before["snapshot"]["tree"]["cached_tokens"] == PREFIX + 2 * SUFFIX

    assert server.flush_cache()
    after = kvctl_json("inspect", "--url", server.url)
    assert after["mirror"]["blocks"] == 0 and after["snapshot"]["tree"]["cached_tokens"] == 0
    assert after["mirror"]["clears"] == before["mirror"]["clears"] + 1
    assert server.generate(prompts[0])["meta_info"]["cached_tokens"] == 0

"""The replay predicts SGLang's per-request cache hits exactly, one request at a time.

A real CPU server (tests/e2e/sglang_server.py: page 4, pool 1,024 tokens, 8 running at
most) runs with one eviction policy and one schedule policy per case; 48 requests whose
prompts share prefixes of 3 "documents" (so hits happen) and together need several times
the pool (so it evicts) are sent one at a time, each after the previous finished. The
same requests are then replayed by `EmbeddedEngine` with the server's own settings read
from /server_info (pool, page, eviction, schedule policy, chunked prefill, max running,
context), arrivals far enough apart that each finishes before the next. Every request's
predicted hit tokens must equal SGLang's `meta_info.cached_tokens` for that request.
"""

from __future__ import annotations

import numpy as np
import pytest

from e2e.sglang_server import SGLangServer, skip_reason

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CASES = [("lru", "fcfs"), ("lfu", "fcfs"), ("lru", "lpm")]
REQUESTS = 48
MAX_NEW = 6


def workload(seed: int = 7) -> list[list[int]]:
    """Prompts of 120-260 tokens: a shared document prefix (3 documents, 40-160 tokens of
    one), then a private tail; ids in [1, 500) below the tiny model's 512-token vocab."""
    rng = np.random.default_rng(seed)
    documents = [rng.integers(1, 500, 200).tolist() for _ in range(3)]
    prompts = []
    for _ in range(REQUESTS):
        doc = documents[int(rng.integers(0, 3))]
        shared = int(rng.integers(40, 161))
        tail = int(rng.integers(40, 101))
        prompts.append(doc[:shared] + rng.integers(1, 500, tail).tolist())
    return prompts


def replay_hits(info: dict, eviction: str, policy: str, prompts: list[list[int]]) -> list[int]:
    """Each request's hit tokens as the replay predicts them, with the server's settings."""
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    config = EngineConfig(
        pool_tokens=int(info["max_total_num_tokens"]), page_size=int(info["page_size"]),
        eviction_policy=eviction, schedule_policy=policy,
        max_running_requests=int(info["max_running_requests"]),
        token_budget=int(info["chunked_prefill_size"]),
        max_prefill_tokens=int(info["max_prefill_tokens"]),
        max_context_len=int(info["context_length"]), namespace_salt="e2e",
    )
    engine = EmbeddedEngine(config)
    for index, prompt in enumerate(prompts):
        engine.submit(RequestSpec(rid=f"r{index}", tokens=np.asarray(prompt, dtype=np.int64),
                                  max_new_tokens=MAX_NEW, arrival_s=index * 100.0))
    hits = {record.rid: record.hit_tokens for record in engine.run_until_idle()}
    engine.check_integrity()
    return [hits[f"r{index}"] for index in range(len(prompts))]


@pytest.mark.parametrize(("eviction", "policy"), CASES, ids=lambda v: v)
def test_replay_hit_tokens_equal_sglang_cached_tokens_per_request(tmp_path, eviction, policy):
    """Per request, predicted hit tokens == SGLang's cached_tokens, at a pool that evicts."""
    if reason := skip_reason():
        pytest.skip(reason)
    # a larger static fraction than the shared server's: on a busy machine SGLang's CPU
    # memory profile can find 0.05 too small; --max-total-tokens fixes the pool anyway
    server = SGLangServer(tmp_path, extra_args=("--radix-eviction-policy", eviction,
                                                "--schedule-policy", policy,
                                                "--mem-fraction-static", "0.2"))
    prompts = workload()
    try:
        server.start()
        info = server.server_info()
        measured = [int(server.generate(p, max_new_tokens=MAX_NEW, ignore_eos=True)
                        ["meta_info"]["cached_tokens"]) for p in prompts]
    finally:
        server.stop()
    assert sum(len(p) for p in prompts) > 4 * int(info["max_total_num_tokens"]), "must evict"
    assert sum(measured) > 0, "the workload must hit"
    predicted = replay_hits(info, eviction, policy, prompts)
    assert predicted == measured

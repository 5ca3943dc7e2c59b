"""The fleet replay on SGLang's real caches: N embedded engines behind a routing policy.

- One replica is exactly today's single-server replay (same hits request by request, same
  steps): the fleet room adds nothing to the engine room.
- The exact directory the oracle reads, fed only by the replicas' own KV events, equals
  what SGLang's radix tree of each replica matches (RadixCache.match_prefix), prompt by
  prompt, after a run that evicted.
- Every request is served once, by the replica the router picked; the router's load counts
  return to zero; a run repeats.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kvctl.fleet.keys import RouterKeys
from kvctl.fleet.loop import FleetLoop
from kvctl.fleet.routers.base import RouteRequest
from kvctl.fleet.routers.registry import make_policy
from kvctl.fleet.runner import FleetSettings, prepare_fleet, run_fleet
from kvctl.replay.mooncake import iter_records, prompt_tokens, to_spec
from kvctl.replay.runner import ReplaySettings, prepare, run_replay

pytestmark = pytest.mark.integration

HEAD = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"
LIMIT = 60
POOL = 40_000  # small enough to evict on head_500's first 60 requests


def settings(**changes) -> ReplaySettings:
    return ReplaySettings(workload=str(HEAD), limit=LIMIT, pool_tokens=POOL, **changes)


@pytest.mark.parametrize("router", ["oracle", "affinity"])
def test_one_replica_is_the_single_server_replay(router):
    single = run_replay(settings()).report.to_dict()
    fleet = run_fleet(prepare_fleet(settings(), FleetSettings(replicas=1, router=router)))
    doc = fleet.to_dict()
    assert single["evicted_tokens"] > 0  # the pool pressure the comparison needs
    assert doc["fleet"]["hit_tokens"] == single["hit_tokens"]
    assert doc["fleet"]["prompt_tokens"] == single["prompt_tokens"]
    assert fleet.steps == (single["steps"],)
    assert doc["replicas"][0]["evicted_tokens"] == single["evicted_tokens"]
    assert doc["fleet"]["ttft_s"]["p99"] == pytest.approx(single["modeled_latency"]["ttft_s"]["p99"])


def build(replicas: int, router: str):
    prepared = prepare(settings())
    config = dataclasses.replace(prepared.config, enable_kv_events=True)
    from engine_adapter.embedded.engine import EmbeddedEngine

    engines = [EmbeddedEngine(config) for _ in range(replicas)]
    policy = make_policy(router, replicas=replicas)
    return engines, FleetLoop(engines, policy, page_size=config.page_size)


def arrivals():
    keys = RouterKeys()
    for record in iter_records(HEAD, limit=LIMIT):
        spec = to_spec(record)
        yield RouteRequest(rid=spec.rid, key=keys.key(record.hash_ids, record.input_length),
                           tokens=spec.tokens, prompt_tokens=record.input_length,
                           arrival_s=spec.arrival_s), spec


def sglang_match(engine, tokens: np.ndarray) -> int:
    """SGLang's own page-aligned match of a prompt (less its last token, as a Req matches),
    under the keys the engine gives a default-tenant request (admission.py: cache_salt is
    the salted namespace label, extra_key the generation)."""
    from engine_adapter.embedded.prefill import namespace_label
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    tree = engine.sglang_components().tree_cache
    from array import array

    key = RadixKey(token_ids=array("q", np.asarray(tokens[:-1], dtype=np.int64).tolist()),
                   extra_key=f"gen{engine.generation}",
                   cache_salt=namespace_label("default", engine.internal_state().namespace_salt))
    return int(tree.match_prefix(MatchPrefixParams(key=key)).device_prefix_len)


def test_the_exact_directory_is_sglangs_tree():
    engines, loop = build(2, "oracle")
    outcomes = loop.run(arrivals())
    assert sum(e.sglang_components().tree_cache.evictable_size() >= 0 for e in engines) == 2
    evicted = [e.snapshot(requests=False, reconcile_refs=False).counters.evicted_tokens
               for e in engines]
    assert sum(evicted) > 0  # the directory had removals to follow
    probes = [prompt_tokens(r) for r in iter_records(HEAD, limit=LIMIT)]
    seen = 0
    for tokens in probes:
        request = RouteRequest(rid="p", key=tokens, tokens=tokens, prompt_tokens=len(tokens),
                               arrival_s=0.0)
        directory = loop.exact_hits(request)
        tree = [sglang_match(e, tokens) for e in engines]
        assert directory == tree
        seen += any(tree)
    assert seen > 0  # some prompts still hit at the end
    assert len(outcomes) == LIMIT


@pytest.mark.parametrize("router", ["oracle", "affinity"])
def test_every_request_once_loads_back_to_zero_and_the_run_repeats(router):
    runs = []
    for _ in range(2):
        engines, loop = build(3, router)
        outcomes = loop.run(arrivals())
        assert sorted(o.rid for o in outcomes) == sorted(f"mc-{i}" for i in range(1, LIMIT + 1))
        assert loop.loads() == [0, 0, 0]
        assert all(o.ttft_s is None or o.ttft_s >= 0 for o in outcomes)
        assert all(o.e2e_s is None or o.e2e_s >= o.ttft_s for o in outcomes)
        runs.append([(o.rid, o.replica, o.hit_tokens, o.ttft_s) for o in outcomes])
    assert runs[0] == runs[1]
    assert len({replica for _, replica, _, _ in runs[0]}) > 1  # the fleet was used


def test_a_refused_request_is_routed_and_moves_the_round_robin_counter():
    """sglang-router routes a request before the worker refuses it, so its round-robin
    counter moves for it: with every third line refused, replicas still alternate in
    arrival order (line i -> replica (i - 1) % 2), and the refused lines never run."""
    engines, loop = build(2, "round_robin")

    def refusing():
        for i, (request, spec) in enumerate(arrivals(), start=1):
            yield request, spec, ("too long" if i % 3 == 0 else None)

    outcomes = {o.rid: o for o in loop.run(refusing())}
    for i in range(1, LIMIT + 1):
        o = outcomes[f"mc-{i}"]
        assert o.replica == (i - 1) % 2
        assert (o.rejected == "too long") == (i % 3 == 0)
    submitted = sum(e.internal_state().counters.requests_submitted for e in engines)
    assert submitted == LIMIT - LIMIT // 3
    assert loop.loads() == [0, 0]

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
from kvctl.replay.runner import ReplaySettings, prepare, run, run_replay

pytestmark = pytest.mark.integration

HEAD = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mooncake" / "head_500.jsonl"
LIMIT = 60
POOL = 40_000  # small enough to evict on head_500's first 60 requests


WIDE_POOL = 1_000_000  # nothing waits for memory: decodes run while requests arrive (jumps)
SPEEDUP = 1.0  # the trace's own arrivals (see the round-robin test)


def settings(**changes) -> ReplaySettings:
    return ReplaySettings(**{"workload": str(HEAD), "limit": LIMIT, "pool_tokens": POOL,
                             **changes})


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


def _single_replay_outcomes(records, folder: Path) -> list[tuple[int, float, float]]:
    """The single-server replay (kvctl.replay.runner, its own loop) of `records` written as a
    trace of their own: (hit tokens, TTFT, finish) per request, in the records' order; TTFT
    None for a request the engine rejected (as the fleet's Outcome has it)."""
    import json

    from kvctl.twin.predict import _Collecting

    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "part.jsonl"
    trace.write_text("".join(json.dumps({
        "timestamp": r.arrival_s * 1000.0, "input_length": r.input_length,
        "output_length": r.output_length, "hash_ids": list(r.hash_ids)}) + "\n"
        for r in records), encoding="utf-8")
    prepared = prepare(ReplaySettings(workload=str(trace), pool_tokens=WIDE_POOL))
    collector = _Collecting(prepared.driver)
    run(dataclasses.replace(prepared, driver=collector))
    by_index = {int(f.rid.removeprefix("mc-")): f for f in collector.finished}
    return [(f.hit_tokens, None if f.rejected is not None else f.ttft_s, f.finish_s)
            for f in (by_index[i] for i in range(1, len(records) + 1))]


def test_two_round_robin_replicas_are_two_single_server_replays(tmp_path):
    """Round robin's choice does not depend on time (line i -> replica (i - 1) % 2), so each
    replica of a 2-replica fleet must serve exactly what the single-server replay serves
    given only that replica's lines at the same arrival times: the same hit tokens, TTFT and
    finish time request by request. The other replica's arrivals stop this replica's decode
    jumps (the loop's horizon) and must change nothing; a loop that let a replica run past
    an arrival before submitting it, or submitted late, delays that request's TTFT. The
    slice is the first 60 lines at their own arrival times (SPEEDUP 1: compressed 20x,
    prefills queue and nothing jumps) and a pool wide enough that nothing waits for memory,
    so requests overlap and a decode (jumping when nothing else is due) is running when most
    of them arrive (checked below). Seen failing with the horizon dropped (TTFT 3.06 s
    instead of 0.60 s) and with every arrival advanced to 50 ms late (hit tokens differ)."""
    records = [dataclasses.replace(r, arrival_s=r.arrival_s / SPEEDUP)
               for r in iter_records(HEAD, limit=LIMIT)]
    config = dataclasses.replace(prepare(settings(pool_tokens=WIDE_POOL)).config,
                                 enable_kv_events=True)
    assert config.decode_jumps  # the replay's default: what the horizon bounds
    from engine_adapter.embedded.engine import EmbeddedEngine

    engines = [EmbeddedEngine(config) for _ in range(2)]
    loop = FleetLoop(engines, make_policy("round_robin", replicas=2), page_size=config.page_size)
    keys = RouterKeys()

    def fleet_arrivals():
        for record in records:
            spec = to_spec(record)
            yield RouteRequest(rid=spec.rid, key=keys.key(record.hash_ids, record.input_length),
                               tokens=spec.tokens, prompt_tokens=record.input_length,
                               arrival_s=spec.arrival_s), spec

    outcomes = {int(o.rid.removeprefix("mc-")): o for o in loop.run(fleet_arrivals())}
    overlapping = 0
    for j in range(2):
        mine = [r for i, r in enumerate(records, start=1) if (i - 1) % 2 == j]
        lines = [i for i in range(1, LIMIT + 1) if (i - 1) % 2 == j]
        assert [outcomes[i].replica for i in lines] == [j] * len(lines)
        expected = _single_replay_outcomes(mine, tmp_path / f"r{j}")
        got = [(outcomes[i].hit_tokens, outcomes[i].ttft_s, outcomes[i].finish_s)
               for i in lines]
        assert [g[0] for g in got] == [e[0] for e in expected]
        assert [g[1] is None for g in got] == [e[1] is None for e in expected]
        assert [g[1] for g in got if g[1] is not None] == pytest.approx(
            [e[1] for e in expected if e[1] is not None], rel=1e-9, abs=1e-9)
        assert [g[2] for g in got] == pytest.approx([e[2] for e in expected], rel=1e-9, abs=1e-9)
        arrivals_j = [r.arrival_s for r in mine]
        overlapping += sum(any(a < t < f for (_, _, f), a in zip(expected, arrivals_j))
                           for t in arrivals_j)
    assert overlapping > LIMIT // 2  # most arrivals land while the replica is busy

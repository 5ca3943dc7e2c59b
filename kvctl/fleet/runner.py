"""Run one fleet replay: N replicas of today's single-server replay behind a router.

    ReplaySettings + FleetSettings --prepare_fleet()--> PreparedFleet (validated, no engine)
                                   --run_fleet()------> FleetResult (figures + per replica)

Every replica is built from the one `EngineConfig` the single-server replay would build
(kvctl/replay/runner.py `prepare`): same pool, page, eviction, scheduler options, clock.
The workload must be a Mooncake trace (or a `kvctl record` recording): a scenario's
sessions keep K/V on the replica that served their last turn (retention), which a fleet
would have to route by session; that is not modelled, and is refused with one line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvctl.errors import InputError
from kvctl.fleet.keys import DEFAULT_VOCAB, RouterKeys
from kvctl.fleet.loop import FleetLoop, Outcome
from kvctl.fleet.report import FleetFigures, figures
from kvctl.fleet.routers.base import RouteRequest
from kvctl.fleet.routers.registry import check_policy, make_policy
from kvctl.replay.runner import PreparedReplay, ReplaySettings, prepare

# Each replica is a whole engine (SGLang's tree, allocator, a req-to-token table of
# max running x context int32: 135 MB at 257 x 131,072), all in this process.
MAX_REPLICAS = 32
_NO_KEY = np.empty(0, dtype=np.int64)  # a policy that reads no text gets no rendered key


@dataclass(frozen=True, kw_only=True)
class FleetSettings:
    """replicas: how many servers; router: a policy name (kvctl/fleet/routers/registry.py);
    router_options: its options (None values: the policy's defaults); regret: also run the
    oracle fleet and report the hit tokens this router missed; vocab_size/key_seed: the
    server vocabulary the router's text is rendered in (kvctl/fleet/keys.py)."""

    replicas: int
    router: str = "cache_aware"
    router_options: dict = field(default_factory=dict)
    regret: bool = False
    vocab_size: int = DEFAULT_VOCAB
    key_seed: int = 0

    def check(self) -> None:
        if self.replicas < 1:
            raise InputError(f"--replicas must be at least 1, got {self.replicas}")
        if self.replicas > MAX_REPLICAS:
            raise InputError(f"--replicas {self.replicas} is more than {MAX_REPLICAS} "
                             "(each replica is a whole engine in this process)")
        check_policy(self.router)
        if self.vocab_size < 2:
            raise InputError(f"--vocab-size must be at least 2, got {self.vocab_size}")


@dataclass(frozen=True, kw_only=True)
class PreparedFleet:
    settings: ReplaySettings
    fleet: FleetSettings
    replica: PreparedReplay  # the single-server replay every replica is


@dataclass(frozen=True, kw_only=True)
class FleetResult:
    figures: FleetFigures
    outcomes: tuple[Outcome, ...]
    header: dict  # the replica settings, the router, the workload
    steps: tuple[int, ...]
    evicted_tokens: tuple[int, ...]
    wall_s: float

    def to_dict(self) -> dict:
        body = self.figures.to_dict()
        for row, steps, evicted in zip(body["replicas"], self.steps, self.evicted_tokens):
            row.update(steps=steps, evicted_tokens=evicted)
        return {**self.header, **body, "wall_clock": {"replay_seconds": round(self.wall_s, 3)}}


def prepare_fleet(settings: ReplaySettings, fleet: FleetSettings) -> PreparedFleet:
    """Validate everything before an engine exists (InputError on bad input)."""
    fleet.check()
    make_policy(fleet.router, replicas=fleet.replicas, options=fleet.router_options)
    replica = prepare(settings)
    if getattr(replica.driver, "summary", None) is None:
        raise InputError("a fleet replay takes a Mooncake trace or a kvctl recording; "
                         "scenario sessions keep K/V on one replica and are not routed yet")
    return PreparedFleet(settings=settings, fleet=fleet, replica=replica)


def run_fleet(prepared: PreparedFleet, *,
              on_progress: Callable[[int, int | None, float], None] | None = None,
              refuse: Callable[[object], str | None] | None = None) -> FleetResult:
    """Replay the trace through the fleet (and, with regret, through the oracle fleet).
    refuse(record): why a real server refuses that trace line at its door (the twin's server
    rule), None to serve it; the router still routes a refused line (FleetLoop.run)."""
    started = time.monotonic()
    fleet = prepared.fleet
    outcomes, steps, evicted = _one_fleet(prepared, fleet.router, on_progress, refuse)
    oracle = None
    if fleet.regret and fleet.router != "oracle":
        oracle, _, _ = _one_fleet(prepared, "oracle", None, refuse)
    elif fleet.regret:
        oracle = outcomes
    figs = figures(outcomes, fleet.replicas, oracle)
    policy = make_policy(fleet.router, replicas=fleet.replicas, options=fleet.router_options,
                         seed=_seed(prepared))
    header = {"workload": prepared.replica.workload, "replica": prepared.replica.resolved,
              "replica_count": fleet.replicas, "router": policy.describe(),
              "router_text": {"vocab_size": fleet.vocab_size, "key_seed": fleet.key_seed},
              "notes": list(prepared.replica.notes)}
    return FleetResult(figures=figs, outcomes=tuple(outcomes), header=header,
                       steps=tuple(steps), evicted_tokens=tuple(evicted),
                       wall_s=time.monotonic() - started)


def _seed(prepared: PreparedFleet) -> int:
    return int(prepared.settings.seed or 0)


def _one_fleet(prepared: PreparedFleet, router: str, on_progress, refuse=None):
    from engine_adapter.embedded import sglang_imports
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.sglang_runtime import stdout_to_stderr
    from kvctl.replay.mooncake import iter_records, to_spec

    fleet = prepared.fleet
    policy = make_policy(router, replicas=fleet.replicas,
                         options=fleet.router_options if router == fleet.router else {},
                         seed=_seed(prepared))
    config = prepared.replica.config
    if policy.wants_kv_events or policy.reads_exact_caches:
        config = dataclasses.replace(config, enable_kv_events=True)
    torch = sglang_imports.load().torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        engines = [EmbeddedEngine(config) for _ in range(fleet.replicas)]
        total = prepared.replica.driver.total_hint()
        def progress(done: int, t: float) -> None:
            if done % 50 == 0 or done == total:
                on_progress(done, total, t)

        loop = FleetLoop(engines, policy, page_size=config.page_size,
                         on_progress=progress if on_progress is not None else None)
        keys: dict[int, RouterKeys] = {}  # by the trace's block size
        settings = prepared.settings

        def arrivals():
            for record in iter_records(settings.workload, limit=settings.limit):
                spec = to_spec(record)
                refused = refuse(record) if refuse is not None else None
                if not policy.reads_text:
                    yield RouteRequest(rid=spec.rid, key=_NO_KEY, tokens=spec.tokens,
                                       prompt_tokens=record.input_length,
                                       arrival_s=spec.arrival_s), spec, refused
                    continue
                render = keys.get(record.block_tokens)
                if render is None:
                    render = keys[record.block_tokens] = RouterKeys(
                        fleet.vocab_size, record.block_tokens, seed=fleet.key_seed)
                yield RouteRequest(rid=spec.rid, key=render.key(record.hash_ids,
                                                                record.input_length),
                                   tokens=spec.tokens, prompt_tokens=record.input_length,
                                   arrival_s=spec.arrival_s), spec, refused

        with stdout_to_stderr():
            outcomes = loop.run(arrivals())
        evicted = [e.snapshot(requests=False, reconcile_refs=False).counters.evicted_tokens
                   for e in engines]
    finally:
        torch.set_num_threads(threads)
    return outcomes, loop.steps, evicted

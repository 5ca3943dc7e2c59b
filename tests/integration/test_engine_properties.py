"""Stateful property tests of the embedded engine on SGLang 0.5.23's real KV components.

Hypothesis drives random sequences of submit / step / tool-wait + resume / fork / finish /
generation bump / cache flush against small pools (512-2048 tokens, pages of 4-16), for
every SGLang eviction policy on both tree cores. After every engine step:

* `engine.check_integrity()` passes: pool ledger residual 0, per-node delta_ref 0 (read from
  SGLang's own pretty_print), funnel monotone, S_runtime <= S_sem, SGLang's sanity_check
  whenever the engine is idle;
* independently of the engine's oracle: the ledger terms sum to the pool, every counter
  and funnel stage only grows, and every reported prefix hit is explained by content that an
  earlier request computed under the same (namespace, model generation): no cross-tenant
  hit, no stale-generation hit (seed 000 0x0CF, 0x07A); a host-tier reload due when a step
  begins is complete by its end; every request gets all the tokens it asked for;
* at the end of each example every session is closed and drained: nothing is protected or
  private, every submitted request finished, and a flush returns the whole pool.

The totals across the module (engine steps, evictions, retractions, reloads, ...) are
printed at the end and the last test asserts that pressure really happened.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from engine_adapter.embedded.config import EVICTION_POLICIES, TREE_CORES
from engine_adapter.embedded.requests import RequestSpec

pytestmark = pytest.mark.integration

MAX_CONTEXT = 1024
MAX_NEW = 160
# Output lengths: finish at prefill, short answers, and long decodes that squeeze the pool.
OUTPUT_LENGTHS = st.sampled_from([1, 3, 16, 40, 96, MAX_NEW])
MAX_OBSERVATION = 48
TENANTS = ("t0", "t1", "t2")
# t1 may read t0's own namespace; t2 may read nothing but its own: "shared" is refused for it.
AUTHORIZED = {"t0": ("shared",), "t1": ("shared", "t0")}
NAMESPACE_CHOICES = ("own", "shared", "other")
RETENTIONS = ("retain", "drop", "offload")
DRAIN_LIMIT = 5_000

# Derandomized and database-less: CI runs the same examples every time. Shrinking a
# 30-rule failure can take minutes per parametrization; it is off unless asked for
# (KVCTL_SHRINK=1), the unshrunk rule sequence is printed either way.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
if os.environ.get("KVCTL_SHRINK") == "1":
    _PHASES.append(Phase.shrink)
PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("KVCTL_PROPERTY_EXAMPLES", "10")),
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    phases=_PHASES,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TALLY: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def optimistic_admission():
    """SGLang's PrefillAdder reserves each running request's remaining outputs up to
    SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (4,096), which these outputs never reach, so at
    that default admission never over-commits and decode almost never retracts. The module
    runs it at 4, as a server started with that variable would: admission is optimistic and
    decode outgrows the pool and retracts (tau_high, when drawn, still caps admission)."""
    from sglang.srt.managers import schedule_policy

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schedule_policy, "CLIP_MAX_NEW_TOKENS", 4)
        yield


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


@dataclasses.dataclass
class SessionState:
    turn: int
    spec: object  # the last submitted RequestSpec


class EngineMachine(RuleBasedStateMachine):
    """One example = one fresh engine; subclasses pick the tree core and the policy."""

    core = "rust"
    policy = "lru"

    def __init__(self) -> None:
        super().__init__()
        self.engine = None
        self.specs: dict[str, object] = {}
        # Every admission (a retracted request is admitted again, maybe under a newer
        # generation): (step, (effective namespace, generation), rid).
        self.admissions: list[tuple[int, tuple[str, int], str]] = []
        self.first_admission: dict[str, tuple[int, tuple[str, int]]] = {}
        self.admitted_keys: set[tuple[str, tuple[str, int]]] = set()
        self.holding: dict[str, tuple[str, int]] = {}  # rid -> (state, generation), last step
        self.content: dict[str, np.ndarray] = {}  # rid -> tokens it computed (prompt + outputs)
        self.sessions: dict[str, SessionState] = {}  # sid -> state, turn in flight or waiting
        self.ready: list[tuple[str, object]] = []  # (sid, FinishedRecord) waiting on a tool
        self.finished: list[object] = []
        self.step_index = 0
        self.clock = 0.0
        self.next_token = 100_000
        self.previous = None

    # ---- set-up ------------------------------------------------------------------------

    @initialize(
        page=st.sampled_from([4, 8, 16]),
        pool_pages_x512=st.sampled_from([1, 2, 4]),
        budget=st.sampled_from([64, 128, 256, 512]),
        tau=st.sampled_from([None, 0.8, 0.95]),
        system_tokens=st.integers(32, 160),
        seed=st.integers(0, 3),
        max_running=st.sampled_from([2, 8]),
        host_capacity=st.sampled_from([None, None, 256]),
    )
    def build(self, page, pool_pages_x512, budget, tau, system_tokens, seed, max_running,
              host_capacity):
        from engine_adapter.embedded.config import EngineConfig
        from engine_adapter.embedded.engine import EmbeddedEngine

        self.page = page
        self.limit = min(MAX_CONTEXT, 512 * pool_pages_x512)  # a request must fit the pool
        self.engine = EmbeddedEngine(EngineConfig(
            pool_tokens=512 * pool_pages_x512, page_size=page, eviction_policy=self.policy,
            tree_core=self.core, token_budget=budget, tau_high=tau, max_running_requests=max_running,
            max_context_len=MAX_CONTEXT, authorized=AUTHORIZED, seed=seed,
            host_capacity_tokens=host_capacity,
        ))
        self.system = np.arange(1, 1 + system_tokens, dtype=np.int64)
        TALLY["examples"] += 1

    # ---- helpers -----------------------------------------------------------------------

    def _unique(self, count: int) -> np.ndarray:
        start = self.next_token
        self.next_token += count
        return np.arange(start, start + count, dtype=np.int64)

    def _namespace(self, tenant: str, choice: str) -> str | None:
        other = TENANTS[(TENANTS.index(tenant) + 1) % len(TENANTS)]
        return {"own": None, "shared": "shared", "other": other}[choice]

    @staticmethod
    def _effective(spec) -> str:
        ns = spec.read_namespace
        return ns if ns == spec.tenant or ns in AUTHORIZED.get(spec.tenant, ()) else spec.tenant

    def _submit(self, spec) -> None:
        self.specs[spec.rid] = spec
        self.engine.submit(spec)

    def _rid(self) -> str:
        return f"r{len(self.specs)}"

    def _step_once(self) -> object:
        engine = self.engine
        report = engine.step()
        self.step_index += 1
        TALLY["steps"] += 1
        self.clock = report.clock_s
        step_start = report.clock_s - report.advanced_s
        for tr in engine.internal_state().reloading:  # a reload due when the step began must be done
            assert tr.reload_ready_s > step_start, (
                f"{tr.spec.rid}: reload ready at {tr.reload_ready_s:.6f}s still pending at "
                f"{report.clock_s:.6f}s (step began {step_start:.6f}s)")
        generation = engine.generation  # bumps happen only between steps
        holding = {rid: (tr.state, tr.generation) for rid, tr in engine.internal_state().by_rid.items()
                   if tr.state != "waiting"}
        for rid, (_, admitted_gen) in holding.items():
            self._admission(rid, admitted_gen)
        for record in report.finished:
            state, admitted_gen = self.holding.get(record.rid, ("waiting", generation))
            # Admitted and finished within this step; or a reload a bump made stale was
            # discarded at this step's start and the request recomputed at this generation.
            if state == "reloading" and admitted_gen != generation:
                admitted_gen = generation
            self._admission(record.rid, admitted_gen)
        self.holding = holding
        for record in report.finished:
            self._on_finished(record)
        self._check_step()
        return report

    def _admission(self, rid: str, generation: int) -> None:
        """Record one admission of `rid` under `generation` (once per generation: a
        retracted request re-admitted under the same key computes the same content)."""
        key = (self._effective(self.specs[rid]), generation)
        if (rid, key) in self.admitted_keys:
            return
        self.admitted_keys.add((rid, key))
        self.admissions.append((self.step_index, key, rid))
        self.first_admission.setdefault(rid, (self.step_index, key))
        self.content.setdefault(rid, np.asarray(self.specs[rid].tokens, dtype=np.int64))

    def _on_finished(self, record) -> None:
        spec = self.specs[record.rid]
        # Every request fits the pool alone: pressure may preempt and recompute it, never end
        # it early. It gets what it asked for, clipped as SGLang's scheduler clips it at its
        # door (init_req_max_new_tokens: to max_req_len - prompt - 1 and to an empty pool's
        # room, pool - paged prompt - page - 1), and at least the prefill's first token.
        config = self.engine.config
        prompt, page = len(spec.tokens), config.page_size
        room = min(min(config.max_context_len, config.pool_tokens) - 1 - prompt - 1,
                   config.pool_tokens - -(-prompt // page) * page - page - 1)
        expected = max(min(spec.max_new_tokens, room), 1)
        assert len(record.output_ids) == expected, (
            f"{record.rid} finished with {len(record.output_ids)} of {expected} tokens")
        self.finished.append(record)
        self.content[record.rid] = np.concatenate([np.asarray(spec.tokens, dtype=np.int64),
                                                   record.output_ids])
        self._assert_hit_explained(record)
        if spec.session is not None and not spec.last_turn:
            self.ready.append((spec.session, record))
        elif spec.session is not None:
            self.sessions.pop(spec.session, None)

    def _assert_hit_explained(self, record) -> None:
        """A hit must be a prefix some earlier request computed under the same key."""
        hit = record.hit_tokens
        assert hit % self.page == 0, f"{record.rid}: hit {hit} is not page aligned"
        assert hit <= record.prompt_tokens - 1, f"{record.rid}: hit {hit} beyond S_cap"
        if hit == 0:
            return
        TALLY["hits"] += 1
        step, key = self.first_admission[record.rid]  # the engine reports the first hit
        prompt = np.asarray(self.specs[record.rid].tokens, dtype=np.int64)
        best = 0
        for other_step, other_key, rid in self.admissions:
            if other_key == key and other_step < step:
                best = max(best, _common_prefix(self.content[rid], prompt))
        assert hit <= best, (
            f"{record.rid} reused {hit} tokens but earlier requests of key {key} explain only "
            f"{best}: cross-namespace or stale-generation hit"
        )

    def _check_step(self) -> None:
        snap = self.engine.check_integrity()
        led = snap.ledger
        assert led.free_tokens + led.evictable_tokens + led.protected_tokens + led.private_tokens \
            == led.pool_tokens == self.engine.config.pool_tokens
        assert snap.refs.per_node and snap.refs.delta_ref_max == 0
        assert snap.funnel.is_monotone()
        if self.previous is not None:
            for name, value in dataclasses.asdict(snap.counters).items():
                assert value >= getattr(self.previous.counters, name), f"counter {name} went down"
            for now, before in zip(snap.funnel.stages, self.previous.funnel.stages):
                assert now.requests >= before.requests and now.tokens >= before.tokens
        self.previous = snap

    # ---- rules -------------------------------------------------------------------------

    @rule(tenant=st.sampled_from(TENANTS), namespace=st.sampled_from(NAMESPACE_CHOICES),
          suffix=st.integers(1, 120), max_new=OUTPUT_LENGTHS, priority=st.integers(0, 3))
    def submit_single(self, tenant, namespace, suffix, max_new, priority):
        tokens = np.concatenate([self.system, self._unique(suffix)])
        self._submit(RequestSpec(rid=self._rid(), tokens=tokens, max_new_tokens=max_new,
                                 arrival_s=self.clock, tenant=tenant,
                                 namespace=self._namespace(tenant, namespace), priority=priority))

    @rule(tenant=st.sampled_from(TENANTS), namespace=st.sampled_from(NAMESPACE_CHOICES),
          suffix=st.integers(1, 120), max_new=OUTPUT_LENGTHS,
          retention=st.sampled_from(RETENTIONS))
    def start_session(self, tenant, namespace, suffix, max_new, retention):
        sid = f"s{len(self.sessions)}-{len(self.specs)}"
        tokens = np.concatenate([self.system, self._unique(suffix)])
        spec = RequestSpec(rid=self._rid(), tokens=tokens, max_new_tokens=max_new,
                           arrival_s=self.clock, tenant=tenant,
                           namespace=self._namespace(tenant, namespace), session=sid,
                           retention=retention, last_turn=False)
        self.sessions[sid] = SessionState(turn=1, spec=spec)
        self._submit(spec)

    @precondition(lambda self: self.ready)
    @rule(data=st.data())
    def resume(self, data):
        """The tool returned: the next turn is previous prompt + output + observation."""
        index = data.draw(st.integers(0, len(self.ready) - 1), label="session")
        wait = data.draw(st.sampled_from([0.0, 0.01, 0.2, 1.5]), label="tool wait s")
        observation = data.draw(st.integers(1, MAX_OBSERVATION), label="observation")
        max_new = data.draw(OUTPUT_LENGTHS, label="max_new")
        sid, record = self.ready.pop(index)
        self._resume(sid, record, wait, observation, max_new)

    def _resume(self, sid, record, wait, observation, max_new, *, force_last=False) -> None:
        session = self.sessions[sid]
        previous = session.spec
        tokens = np.concatenate([np.asarray(previous.tokens, dtype=np.int64), record.output_ids,
                                 self._unique(observation)])
        if len(tokens) + max_new > self.limit:  # the context window ends the session
            tokens = tokens[: self.limit - max_new]
            force_last = True
        grows = len(tokens) + max_new + MAX_OBSERVATION + 16 > self.limit
        last = force_last or grows or session.turn >= 4
        spec = dataclasses.replace(previous, rid=self._rid(), tokens=tokens, max_new_tokens=max_new,
                                   arrival_s=record.finish_s + wait, last_turn=last)
        session.turn += 1
        session.spec = spec
        TALLY["turns"] += 1
        self._submit(spec)

    @rule(children=st.integers(2, 4), kind=st.sampled_from(["self-consistency", "tree-of-thought"]),
          from_finished=st.booleans(), max_new=st.integers(1, 16), tenant=st.sampled_from(TENANTS))
    def fork(self, children, kind, from_finished, max_new, tenant):
        """N children on one prefix, all arriving now."""
        base_spec = None
        if from_finished and self.finished:
            record = self.finished[-1]
            base_spec = self.specs[record.rid]
            base = np.concatenate([np.asarray(base_spec.tokens, dtype=np.int64), record.output_ids])
        else:
            base = np.concatenate([self.system, self._unique(24)])
        parent = self._rid()
        for child in range(children):
            tokens = base if kind == "self-consistency" else np.concatenate([base, self._unique(8)])
            tokens = tokens[: self.limit - max_new]
            self._submit(RequestSpec(
                rid=f"{parent}.b{child}", tokens=tokens, max_new_tokens=max_new, arrival_s=self.clock,
                tenant=base_spec.tenant if base_spec else tenant,
                namespace=base_spec.namespace if base_spec else None,
            ))
        TALLY["forks"] += 1

    @rule(steps=st.integers(1, 8))
    def step(self, steps):
        for _ in range(steps):
            if not self.engine.has_work():
                break
            self._step_once()

    @rule()
    def bump_generation(self):
        self.engine.bump_generation()
        TALLY["bumps"] += 1

    @rule()
    def flush_cache(self):
        self.engine.flush_cache()

    @invariant()
    def integrity_between_rules(self):
        if self.engine is not None:
            self._check_step()

    # ---- end of example: close every session, drain, and check nothing is left --------

    def teardown(self):
        if self.engine is None:
            return
        engine = self.engine
        steps = 0
        while True:
            while engine.has_work():
                self._step_once()
                steps += 1
                assert steps < DRAIN_LIMIT, "the engine did not drain"
            if not self.ready:
                break
            for sid, record in list(self.ready):
                self._resume(sid, record, 0.0, 4, 2, force_last=True)
            self.ready.clear()
        snap = engine.check_integrity()  # idle, no lease: SGLang's sanity_check runs too
        led = snap.ledger
        assert led.protected_tokens == 0 and led.private_tokens == 0, led
        assert not [r for r in snap.requests if r.state in ("retained", "offloaded")]
        assert led.host_tokens == 0
        assert snap.counters.requests_finished == snap.counters.requests_submitted == len(self.specs)
        engine.flush_cache()
        after = engine.check_integrity().ledger
        assert after.free_tokens == after.pool_tokens, after
        for name in ("evictions", "retractions", "admission_deferrals", "reloaded_tokens"):
            TALLY[name] += getattr(snap.counters, name)
        TALLY["mapping_stalls"] += snap.mapping.stalls_total
        TALLY.update({f"reject:{b.reason}": b.requests for b in snap.funnel.rejections})


@pytest.mark.parametrize("policy", EVICTION_POLICIES)
@pytest.mark.parametrize("core", TREE_CORES)
def test_engine_invariants_hold_under_random_workloads(core, policy, sglang_ready):
    """Every step of every random workload keeps the ledger, refs, funnel and isolation
    invariants, for this tree core and eviction policy."""
    _run_property_suite(core, policy)


DONE: set[tuple[str, str]] = set()  # (core, policy) pairs whose workloads are in TALLY


def _run_property_suite(core: str, policy: str) -> None:
    machine = type(f"Engine_{core}_{policy}", (EngineMachine,), {"core": core, "policy": policy})
    before = TALLY["steps"]
    run_state_machine_as_test(machine, settings=PROPERTY_SETTINGS)
    assert TALLY["steps"] > before
    TALLY["parametrizations"] += 1
    DONE.add((core, policy))


def test_property_suite_really_exercised_pressure(sglang_ready):
    """Across the module the random workloads evicted, retracted, deferred, reloaded, hit,
    and hit every rejection bucket kvctl can produce on one node. In file order it runs
    last and reuses the suite's tally; selected alone (-k) or in another order it first
    runs the (core, policy) pairs not yet run, so it never skips and never judges a part."""
    for core in TREE_CORES:
        for policy in EVICTION_POLICIES:
            if (core, policy) not in DONE:
                _run_property_suite(core, policy)
    print("\nproperty totals:", dict(sorted(TALLY.items())))
    assert TALLY["steps"] >= 3_000
    for name in ("evictions", "retractions", "admission_deferrals", "reloaded_tokens",
                 "mapping_stalls", "hits", "turns", "forks", "bumps"):
        assert TALLY[name] > 0, name
    for reason in ("unauthorized_namespace", "index_miss", "incompatible_namespace",
                   "stale_generation", "evicted"):
        assert TALLY[f"reject:{reason}"] > 0, reason

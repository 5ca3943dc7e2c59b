"""The routing policies of sglang-router 0.3.2, as pure-Python `RouterPolicy` classes.

Reference: sglang-router 0.3.2 = crate sgl-model-gateway 0.3.2 (PyPI sdist
sglang_router-0.3.2.tar.gz, the source the shipped wheel was built from; docs/fleet-router.md
gives the rules with their file/function and says how the version was pinned). Each class
mirrors one Rust policy of its HTTP router (`src/routers/http/router.rs`); comments name the
Rust function each rule comes from. Defaults are the launcher's (`sglang_router/router_args.py`
RouterArgs, which `python -m sglang_router.launch_router` passes to Rust), not the Rust
`CacheAwareConfig::default()` (0.5 / 32 / 1.1 / 30 s / 10000), which the launcher overrides.

Two facts of 0.3.2 shape what the fleet loop must hand these policies:
- The router's own in-flight count (`worker.load()`, FleetView.loads()) is only kept for
  cache_aware (and manual): `route_typed_request_once` creates a `WorkerLoadGuard` only when
  the policy's name is "cache_aware" or "manual"; it increments after the worker is picked and
  decrements when the response body has been read (non-streaming) or the streamed body is
  dropped (end of stream or client gone). For power_of_two, round_robin and random it stays 0.
- power_of_two compares the token loads a `LoadMonitor` polls from every worker's
  `/get_load` (sum of `num_tokens`) every `worker_startup_check_interval` = 30 s, the first
  poll at router start; without both workers' polled loads it compares `worker.load()`, which
  for power_of_two is 0, so it keeps its first random pick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from kvctl.errors import InputError, RuntimeFailure
from kvctl.fleet.routers.approx_tree import ApproxTree
from kvctl.fleet.routers.base import FleetView, RouteRequest, RouterPolicy

SOURCE = "sglang-router 0.3.2"

# sglang_router/router_args.py RouterArgs (0.3.2), confirmed with `launch_router --help`.
DEFAULT_CACHE_THRESHOLD = 0.3
DEFAULT_BALANCE_ABS_THRESHOLD = 64
DEFAULT_BALANCE_REL_THRESHOLD = 1.5
DEFAULT_EVICTION_INTERVAL_S = 60
DEFAULT_MAX_TREE_SIZE = 2**26
# LoadMonitor interval: app_context.rs `with_load_monitor` passes
# `worker_startup_check_interval_secs` (RouterArgs.worker_startup_check_interval = 30); the
# PowerOfTwo `load_check_interval_secs: 5` of the Python binding's config is never read.
DEFAULT_LOAD_CHECK_INTERVAL_S = 30

# What the router's tree sees as the request's text (`extract_text_for_routing`).
REQUEST_TEXT_MODES = ("text", "input_ids", "empty")


# -- option checks (one-line InputError naming the option) --------------------------------


def _real(policy: str, option: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{policy} {option} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise InputError(f"{policy} {option} must be a finite number, got {value!r}")
    return v


def _int(policy: str, option: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{policy} {option} must be an integer, got {value!r}")
    return int(value)


def _seed(policy: str, value) -> int:
    seed = _int(policy, "seed", value)
    if seed < 0:
        raise InputError(f"{policy} seed must be a non-negative integer, got {seed}")
    return seed


def _healthy_indices(view: FleetView, policy: str) -> list[int]:
    """policies/mod.rs `get_healthy_worker_indices` over the router's available workers
    (router.rs `select_worker_for_model` keeps only `is_available()` workers first)."""
    healthy = view.healthy()
    idx = [i for i in range(view.replicas) if healthy[i]]
    if not idx:
        # The Rust policy returns None and the router answers 503 no_available_workers.
        raise RuntimeFailure(f"{policy}: no healthy replica to route to")
    return idx


def input_ids_text(tokens) -> np.ndarray:
    """The text sglang-router 0.3.2 routes on for a /generate request that carries only
    `input_ids`: the ids in decimal joined by single spaces (protocols/generate.rs
    `GenerateRequest::extract_text_for_routing`), one uint8 per character."""
    ids = np.asarray(tokens)
    if ids.ndim != 1:
        raise ValueError(f"input_ids must be 1-D, got shape {ids.shape}")
    if ids.size == 0:
        return np.zeros(0, dtype=np.uint8)
    if ids.dtype.kind not in "iu":
        raise ValueError(f"input_ids must be integers, got dtype {ids.dtype}")
    v = ids.astype(np.int64)
    if int(v.min()) < 0:
        text = " ".join(str(int(t)) for t in v)  # Rust i32::to_string keeps the '-'
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8).copy()
    digits = np.ones(v.shape[0], dtype=np.int64)
    p = 10
    while True:
        more = v >= p
        if not more.any():
            break
        digits += more
        p *= 10
    widths = digits + 1  # each id and the space after it
    ends = np.cumsum(widths) - 2  # where each id's last digit goes
    out = np.full(int(widths.sum()), 32, dtype=np.uint8)
    q = v.copy()
    for j in range(int(digits.max())):  # j-th digit from the right
        if j == 0:
            out[ends] = q % 10 + 48
        else:
            m = digits > j
            out[ends[m] - j] = q[m] % 10 + 48
        q //= 10
    return out[:-1]  # no space after the last id


# -- round_robin ---------------------------------------------------------------------------


class RoundRobin(RouterPolicy):
    """policies/round_robin.rs `RoundRobinPolicy::select_worker`: one counter, bumped on every
    call, indexes the healthy workers: `healthy[count % len(healthy)]`."""

    name: ClassVar[str] = "round_robin"

    def __init__(self) -> None:
        self._counter = 0

    def select(self, request: RouteRequest, view: FleetView) -> int:
        healthy = _healthy_indices(view, self.name)
        count = self._counter  # fetch_add(1)
        self._counter += 1
        return healthy[count % len(healthy)]

    def describe(self) -> dict:
        return {"name": self.name, "source": SOURCE}


# -- random --------------------------------------------------------------------------------


class Random(RouterPolicy):
    """policies/random.rs `RandomPolicy::select_worker`: uniform over the healthy workers.
    Rust draws from an OS-seeded thread RNG; here a numpy PCG64 seeded by `seed`."""

    name: ClassVar[str] = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = _seed(self.name, seed)
        self._rng = np.random.default_rng(self.seed)

    def select(self, request: RouteRequest, view: FleetView) -> int:
        healthy = _healthy_indices(view, self.name)
        return healthy[int(self._rng.integers(0, len(healthy)))]

    def describe(self) -> dict:
        return {"name": self.name, "seed": self.seed, "source": SOURCE}


# -- power_of_two --------------------------------------------------------------------------


class PowerOfTwo(RouterPolicy):
    """policies/power_of_two.rs `PowerOfTwoPolicy::select_worker`.

    Two distinct healthy workers: i1 uniform in [0, n), i2 = (i1 + 1 + uniform[0, n-1)) % n.
    Loads: the token loads of the last LoadMonitor poll when the poll has both workers,
    else both workers' `worker.load()`, which the 0.3.2 HTTP router never increments for
    power_of_two (no WorkerLoadGuard), i.e. 0. The first pick wins ties (`load1 <= load2`).

    poll_loads: the fleet loop's stand-in for the workers' `/get_load` answers: called as
      `poll_loads(poll_s)` at each poll instant (k * load_check_interval_s, k >= 0, the first
      at router start, tokio `interval` ticks at once) that `tick` passes, and returns one
      token load per replica (SGLang's /get_load `num_tokens`, summed over dp ranks; -1 where
      the fetch failed, which Rust keeps and compares as the lowest load). None: no monitor
      data ever, the pure fallback path (the first random pick). That is also what 0.3.2
      does against an SGLang without a `/get_load` route (every poll stores -1 for every
      worker, and -1 <= -1 keeps the first pick): docs/fleet-router.md.
    """

    name: ClassVar[str] = "power_of_two"

    def __init__(
        self,
        seed: int = 0,
        load_check_interval_s: float = DEFAULT_LOAD_CHECK_INTERVAL_S,
        poll_loads: Callable[[float], Sequence[int]] | None = None,
    ) -> None:
        self.seed = _seed(self.name, seed)
        interval = _real(self.name, "--worker-startup-check-interval", load_check_interval_s)
        if interval <= 0:
            raise InputError(
                f"{self.name} --worker-startup-check-interval (the load poll interval) must be "
                f"above 0 seconds, got {load_check_interval_s!r}"
            )
        if poll_loads is not None and not callable(poll_loads):
            raise InputError(f"{self.name} poll_loads must be callable or None")
        self.load_check_interval_s = interval
        self._poll = poll_loads
        self._rng = np.random.default_rng(self.seed)
        self._cached: list[int] | None = None  # cached_loads (empty map before any poll)
        self._next_poll_s = 0.0
        self.polls = 0

    def tick(self, now_s: float) -> None:
        """worker_manager.rs `LoadMonitor::monitor_loop`: a poll at every interval instant;
        the policy's cache is replaced wholesale (`update_loads`), so of the instants passed
        since the last tick only the latest one matters."""
        if self._poll is None or now_s < self._next_poll_s:
            return
        k = math.floor(now_s / self.load_check_interval_s)
        poll_s = k * self.load_check_interval_s
        loads = self._poll(poll_s)
        self._cached = [int(x) for x in loads]
        self.polls += 1
        self._next_poll_s = (k + 1) * self.load_check_interval_s

    def select(self, request: RouteRequest, view: FleetView) -> int:
        healthy = _healthy_indices(view, self.name)
        n = len(healthy)
        if n == 1:
            return healthy[0]
        i1 = int(self._rng.integers(0, n))
        i2 = (i1 + 1 + int(self._rng.integers(0, n - 1))) % n
        w1, w2 = healthy[i1], healthy[i2]
        cached = self._cached
        if cached is not None and w1 < len(cached) and w2 < len(cached):
            load1, load2 = cached[w1], cached[w2]
        else:
            load1 = load2 = 0  # worker.load(): never incremented for power_of_two in 0.3.2
        return w1 if load1 <= load2 else w2

    def describe(self) -> dict:
        return {
            "name": self.name,
            "seed": self.seed,
            "load_check_interval_s": self.load_check_interval_s,
            "polled_loads": self._poll is not None,
            "source": SOURCE,
        }


# -- cache_aware ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheAwareDecision:
    """How the last `select` decided (for tests and explanations)."""

    path: str  # "imbalanced", "cache_hit", "min_load", "stale_fallback"
    replica: int
    matched: int  # characters matched in the tree (0 on the imbalanced path)
    text_chars: int  # characters of the routed text
    tenant: int | None  # the tree's answer (None on the imbalanced path / empty sentinel)


class CacheAware(RouterPolicy):
    """policies/cache_aware.rs `CacheAwarePolicy::select_worker` over one approximate tree.

    Per request, over the healthy workers (the Rust `workers` slice is the available ones):
    1. loads = router in-flight counts; imbalanced iff (max - min) > balance_abs_threshold AND
       max > min * balance_rel_threshold (f32 arithmetic). Imbalanced: the least-loaded
       worker (first on ties), and the text is still inserted for it (`select_worker_min_load`).
    2. Balanced: prefix_match; match_rate = matched / chars (0 for empty text, f32);
       match_rate > cache_threshold (strict): the matched tenant; else the least-loaded
       worker (first on ties). The text is inserted for the chosen worker.
    3. A matched tenant that is not an available worker is removed from the tree and the
       request goes to the first healthy worker (nothing inserted).
    The tree is created with every worker inserted with the empty text (`init_workers`),
    here at the first `select`, in replica order.

    request_text: what the router's tree sees (`extract_text_for_routing`):
      "text"      the request's `key` (a text request: /generate `text`, completions prompt);
      "input_ids" a /generate request carrying only `input_ids`: 0.3.2 routes on the ids in
                  decimal joined by spaces, rendered from `request.key` (the ids the server receives);
      "empty"     a request with neither (e.g. input_embeds): the empty text.
    eviction_interval_s: `tick` runs the LRU eviction at k * interval router seconds, k >= 1
      (PeriodicTask sleeps first), at most once per tick.
    """

    name: ClassVar[str] = "cache_aware"
    reads_text: ClassVar[bool] = True

    def __init__(
        self,
        cache_threshold: float = DEFAULT_CACHE_THRESHOLD,
        balance_abs_threshold: int = DEFAULT_BALANCE_ABS_THRESHOLD,
        balance_rel_threshold: float = DEFAULT_BALANCE_REL_THRESHOLD,
        eviction_interval_s: float = DEFAULT_EVICTION_INTERVAL_S,
        max_tree_size: int = DEFAULT_MAX_TREE_SIZE,
        request_text: str = "text",
    ) -> None:
        p = self.name
        # config/validation.rs `validate_policy` (CacheAware) ranges, plus the Rust types'.
        thr = _real(p, "--cache-threshold", cache_threshold)
        if not 0.0 <= thr <= 1.0:
            raise InputError(f"{p} --cache-threshold must be between 0.0 and 1.0, got {thr}")
        abs_thr = _int(p, "--balance-abs-threshold", balance_abs_threshold)
        if abs_thr < 0:
            raise InputError(f"{p} --balance-abs-threshold must be >= 0, got {abs_thr}")
        rel = _real(p, "--balance-rel-threshold", balance_rel_threshold)
        if rel < 1.0:
            raise InputError(f"{p} --balance-rel-threshold must be >= 1.0, got {rel}")
        interval = _real(p, "--eviction-interval-secs", eviction_interval_s)
        if interval <= 0:
            raise InputError(f"{p} --eviction-interval-secs must be above 0, got {interval}")
        size = _int(p, "--max-tree-size", max_tree_size)
        if size <= 0:
            raise InputError(f"{p} --max-tree-size must be above 0, got {size}")
        if request_text not in REQUEST_TEXT_MODES:
            raise InputError(
                f"{p} request_text must be one of {', '.join(REQUEST_TEXT_MODES)}, "
                f"got {request_text!r}"
            )
        self.cache_threshold = thr
        self.balance_abs_threshold = abs_thr
        self.balance_rel_threshold = rel
        self.eviction_interval_s = interval
        self.max_tree_size = size
        self.request_text = request_text
        # The Rust config fields are f32 (the PyO3 binding converts the Python floats).
        self._thr32 = np.float32(thr)
        self._rel32 = np.float32(rel)
        # Decimal input_ids text is ASCII; keys are characters / token ids (< 2**31).
        self.tree = ApproxTree(np.uint8 if request_text == "input_ids" else np.int32)
        self._workers: int | None = None
        self._next_eviction_s = interval
        self.evictions = 0
        self.last: CacheAwareDecision | None = None

    # -- time ----------------------------------------------------------------------------

    def tick(self, now_s: float) -> None:
        """cache_aware.rs `with_config` eviction task (utils.rs `PeriodicTask`): every
        `eviction_interval_s`, `evict_tenant_by_size(max_tree_size)`. Several instants passed
        since the last tick run it once (a second pass in a row changes nothing)."""
        if now_s < self._next_eviction_s:
            return
        self.tree.evict_tenant_by_size(self.max_tree_size)
        self.evictions += 1
        k = math.floor(now_s / self.eviction_interval_s)
        self._next_eviction_s = (k + 1) * self.eviction_interval_s

    # -- routing -------------------------------------------------------------------------

    def routing_text(self, request: RouteRequest) -> np.ndarray:
        """The text the router's tree sees for `request`, as tree keys."""
        if self.request_text == "text":
            return self.tree.as_key(request.key)
        if self.request_text == "input_ids":
            return input_ids_text(request.key)
        return self.tree.as_key(np.zeros(0, dtype=np.int64))

    def _init_workers(self, replicas: int) -> None:
        """cache_aware.rs `init_workers`: insert the empty text for every worker."""
        for i in range(replicas):
            self.tree.insert(np.zeros(0, dtype=self.tree.dtype), i)
        self._workers = replicas

    def select(self, request: RouteRequest, view: FleetView) -> int:
        if self._workers is None:
            self._init_workers(view.replicas)
        healthy = _healthy_indices(view, self.name)
        all_loads = view.loads()
        loads = [int(all_loads[i]) for i in healthy]
        text = self.routing_text(request)
        tree = self.tree

        # select_worker: min/max over the workers slice; imbalance needs BOTH conditions.
        lo, hi = min(loads), max(loads)
        imbalanced = (hi - lo) > self.balance_abs_threshold and np.float32(hi) > (
            np.float32(lo) * self._rel32
        )
        # min_by_key keeps the first minimum: the lowest healthy index among equal loads.
        min_load = healthy[loads.index(lo)]
        if imbalanced:
            # select_worker_min_load: shortest queue, and the tree still learns the text.
            tree.insert(text, min_load)
            self.last = CacheAwareDecision("imbalanced", min_load, 0, len(text), None)
            return min_load

        matched, tenant = tree.prefix_match(text)
        chars = len(text)
        if chars == 0:
            hit = False  # match_rate = 0.0, and 0.0 > threshold never holds (threshold >= 0)
        else:
            rate = np.float32(matched) / np.float32(chars)
            hit = bool(rate > self._thr32)
        if hit:
            chosen = tenant if tenant in healthy else None  # position(url) + is_healthy
            path = "cache_hit"
        else:
            chosen = min_load
            path = "min_load"
        if chosen is not None:
            tree.insert(text, chosen)
            self.last = CacheAwareDecision(path, chosen, matched, chars, tenant)
            return chosen
        # The matched worker is gone: drop it from the tree, fall back to the first healthy.
        if tenant is not None:
            tree.remove_tenant(tenant)
        self.last = CacheAwareDecision("stale_fallback", healthy[0], matched, chars, tenant)
        return healthy[0]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "cache_threshold": self.cache_threshold,
            "balance_abs_threshold": self.balance_abs_threshold,
            "balance_rel_threshold": self.balance_rel_threshold,
            "eviction_interval_s": self.eviction_interval_s,
            "max_tree_size": self.max_tree_size,
            "request_text": self.request_text,
            "source": SOURCE,
        }


# The policy names sglang-router's --policy takes, for a registry to look up.
SGLANG_POLICIES: dict[str, type[RouterPolicy]] = {
    RoundRobin.name: RoundRobin,
    Random.name: Random,
    PowerOfTwo.name: PowerOfTwo,
    CacheAware.name: CacheAware,
}

"""The contract between the fleet loop and a routing policy.

A policy decides from what a real router knows at the instant a request arrives: the
request itself, its own state (an approximate tree, a directory, a counter) and the
router's own load counts. The fleet loop hands it a `FleetView` with exactly that; only
the `oracle` policy reads the replicas' exact caches (`FleetView.exact_hits`).

    loop, for each arrival in time order (replicas advanced to the arrival first):
        policy.tick(now_s)                      # time-driven upkeep (tree eviction, polls)
        j = policy.select(request, view)        # a healthy replica index
        ... the request runs on replica j ...
        policy.on_complete(j, rid, finish_s)    # when its response has finished

Pure: no SGLang, no I/O. A policy is deterministic for its seed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np


@dataclass(frozen=True, kw_only=True)
class RouteRequest:
    """One request as the router sees it.

    key: the request text as the router's tree sees it, one int64 element per character
      (kvctl renders a prompt's token ids as one character each: docs/fleet.md, so a
      character-level router tree over the text is a token-level tree over `key`).
    prompt_tokens: the prompt's length in the replica's tokens (what `Match / S` divides by).
    tokens: the prompt's token ids as the replica's cache sees them (the oracle and the
      affinity directory hash these; a text-based router never reads them).
    """

    rid: str
    key: np.ndarray
    tokens: np.ndarray
    prompt_tokens: int
    arrival_s: float


class FleetView(Protocol):
    """What the loop tells a policy at one instant."""

    @property
    def replicas(self) -> int: ...

    def loads(self) -> list[int]:
        """The router's own count per replica: requests routed there whose response has
        not finished at this instant (what sglang-router's `worker.load()` counts)."""
        ...

    def healthy(self) -> list[bool]:
        """Replicas the router may pick (all True in a replay)."""
        ...

    def exact_hits(self, request: RouteRequest) -> list[int]:
        """Tokens each replica's cache would hit for `request` now (the oracle's only)."""
        ...


class RouterPolicy(ABC):
    """A routing policy. Subclasses set `name` and implement `select`."""

    name: ClassVar[str]
    # The loop feeds `on_kv_events` with every replica's SGLang KV events (a directory
    # policy); the replicas then run with KV events on.
    wants_kv_events: ClassVar[bool] = False
    # The policy reads `FleetView.exact_hits` (the oracle only): the loop keeps an exact,
    # page-granular directory of every replica's cache.
    reads_exact_caches: ClassVar[bool] = False
    # The policy reads `RouteRequest.key` (the request text); the loop renders keys only
    # for such a policy (rendering a trace line's key costs milliseconds).
    reads_text: ClassVar[bool] = False

    @abstractmethod
    def select(self, request: RouteRequest, view: FleetView) -> int:
        """The replica (0-based) this request goes to. Updates the policy's own state as
        the real router does at this point (a tree insert, a counter)."""

    def tick(self, now_s: float) -> None:
        """Time passed to `now_s` (router seconds): periodic upkeep the real router runs on
        a timer (cache_aware's tree eviction, power_of_two's load polls). Default: none."""

    def on_complete(self, replica: int, rid: str, now_s: float) -> None:
        """A response routed to `replica` finished at `now_s`. Default: nothing (the view's
        load counts already drop)."""

    def on_kv_events(self, replica: int, events: list) -> None:
        """SGLang KV events (BlockStored, BlockRemoved, AllBlocksCleared) one replica's cache
        emitted in its latest step; only for a policy with `wants_kv_events`."""

    def describe(self) -> dict:
        """The policy's name and options, for the report header and --json."""
        return {"name": self.name}

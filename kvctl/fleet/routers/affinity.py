"""Seed 003's joint affinity-load router (cluster-scale prefix trie routing, figure 7).

    w* = argmax_j [ mu * (Match_j / S) - (1 - mu) * (L_j / L_max)^gamma ]

Match_j: prompt tokens covered by the longest run of leading 16-token chunk fingerprints
that worker j holds in the central directory (kvctl/fleet/directory.py), fed by the KV
events the workers publish as they store and evict; S: the prompt's length; L_j: the
router's own in-flight count for worker j ("execution queue depth"), L_max = max_j L_j
(the load term is 0 while every worker is idle). Ties go to the lower load, then the lower
index, so a run repeats.

The seed gives no values for mu and gamma. kvctl's defaults, mu = 0.7 and gamma = 2, keep
a worker holding the whole prefix ahead of an idle worker holding none even at the
fleet's highest load (0.7 - 0.3 > 0), and let load decide between similar matches.
"""

from __future__ import annotations

from kvctl.errors import InputError
from kvctl.fleet.directory import CHUNK_TOKENS, PrefixDirectory
from kvctl.fleet.routers.base import FleetView, RouteRequest, RouterPolicy

DEFAULT_MU = 0.7
DEFAULT_GAMMA = 2.0


def affinity_score(match: int, prompt: int, load: int, max_load: int, mu: float,
                   gamma: float) -> float:
    """mu * Match/S - (1 - mu) * (L/L_max)^gamma (seed 003 figure 7)."""
    hit = match / prompt if prompt else 0.0
    pressure = (load / max_load) ** gamma if max_load else 0.0
    return mu * hit - (1.0 - mu) * pressure


class Affinity(RouterPolicy):
    """Seed 003's router over a KV-event-fed directory of 16-token chunk fingerprints."""

    name = "affinity"
    wants_kv_events = True

    def __init__(self, replicas: int, *, mu: float = DEFAULT_MU, gamma: float = DEFAULT_GAMMA,
                 chunk_tokens: int = CHUNK_TOKENS, seed: int = 0) -> None:
        if not 0.0 <= mu <= 1.0:
            raise InputError(f"--mu must be between 0 and 1, got {mu:g}")
        if not gamma > 0.0:
            raise InputError(f"--gamma must be positive, got {gamma:g}")
        self.mu = mu
        self.gamma = gamma
        self.directory = PrefixDirectory(replicas, chunk_tokens, seed=seed)

    def select(self, request: RouteRequest, view: FleetView) -> int:
        matches = self.directory.match(self.directory.chunk_hashes(request.tokens))
        loads = view.loads()
        healthy = view.healthy()
        top = max(loads) if loads else 0
        best, best_key = -1, None
        for j, (match, load) in enumerate(zip(matches, loads)):
            if not healthy[j]:
                continue
            key = (affinity_score(match, request.prompt_tokens, load, top, self.mu, self.gamma),
                   -load, -j)
            if best_key is None or key > best_key:
                best, best_key = j, key
        return best

    def on_kv_events(self, replica: int, events: list) -> None:
        self.directory.apply(replica, events)

    def describe(self) -> dict:
        return {"name": self.name, "mu": self.mu, "gamma": self.gamma,
                "chunk_tokens": self.directory.chunk}

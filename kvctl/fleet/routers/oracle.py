"""The oracle: routes by every replica's exact cache and load, to measure regret.

No real router can do this: it reads, at the arrival instant, the prefix each replica's
own radix cache would hit (`FleetView.exact_hits`, page-granular, from the replicas' KV
events), and sends the request where the hit is longest; ties go to the lower in-flight
load, then the lower index. Its hit tokens bound what a prefix-aware router can reuse
request by request, so `hit(oracle) - hit(policy)` per request is the policy's routing
regret (kvctl/fleet/report.py). Greedy, not a global optimum: a request it sends to
its longest hit can evict what a later request would have hit.
"""

from __future__ import annotations

from kvctl.fleet.routers.base import FleetView, RouteRequest, RouterPolicy


class Oracle(RouterPolicy):
    name = "oracle"
    reads_exact_caches = True

    def select(self, request: RouteRequest, view: FleetView) -> int:
        hits = view.exact_hits(request)
        loads = view.loads()
        healthy = view.healthy()
        candidates = [j for j in range(len(hits)) if healthy[j]]
        return max(candidates, key=lambda j: (hits[j], -loads[j], -j))

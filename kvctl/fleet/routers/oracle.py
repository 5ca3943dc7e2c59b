"""The oracle: routes by every replica's exact cache and load, to measure regret.

No real router can do this: it reads, at the arrival instant, the prefix each replica's
own radix cache would hit (`FleetView.exact_hits`, page-granular, from the replicas' KV
events), and sends the request where the hit is longest; ties go to the lower in-flight
load, then the lower index. The routing regret of a policy (kvctl/fleet/report.py) is the
hit tokens the oracle got, request by request, that the policy did not. Greedy, not a
global optimum, so not an upper bound in aggregate: a request it sends to its longest hit
can evict, or crowd, what a later request would have hit (on head_500 at 4 x 300,000
tokens cache_aware hit more tokens in all than the oracle: docs/fleet.md), which is why
the report prints both totals beside the regret.
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

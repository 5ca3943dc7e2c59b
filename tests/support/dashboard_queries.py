"""TEST-ONLY: a dashboard's panel queries with Grafana's variables filled in, as Grafana would
send them to Prometheus for one instance. Not a test module.

HICACHE_METRIC marks the queries that need a server with SGLang's HiCache (and the kvctl
plugin): the embedded-engine exporter has no host tier, so those are evaluated against the
real HiCache server in tests/e2e/test_e2e_hicache.py instead. FLEET_METRICS mark the queries
that need a fleet behind a router (per-replica and router families exist only there): they are
evaluated against the real sandbox fleet in tests/e2e/test_e2e_fleet_sandbox.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

GRAFANA_RANGE = "1m"  # stands in for $__rate_interval / $__range / $__interval
HICACHE_METRIC = "kvctl_hicache_"
FLEET_METRICS = ("kvctl_fleet_", "kvctl_replica_", "kvctl_router_")


def is_fleet_query(expr: str) -> bool:
    """The query reads a family only a fleet exports (telemetry/fleet_metrics.py)."""
    return any(prefix in expr for prefix in FLEET_METRICS)


def panel_queries(path: Path, instance: str) -> list[tuple[str, str]]:
    """(panel title [refId], PromQL) for every target of every panel of `path`."""
    dashboard = json.loads(path.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            # Grafana regex-escapes a multi-value variable inside a PromQL string ("\\.").
            expr = target["expr"].replace("$instance", re.escape(instance).replace("\\", "\\\\"))
            for variable in ("$__rate_interval", "$__range", "$__interval"):
                expr = expr.replace(variable, GRAFANA_RANGE)
            queries.append((f"{path.name}: {panel['title']} [{target['refId']}]", expr))
    return queries

"""Dashboards and Prometheus rules, checked as files: every query names a real metric, the
overview is templated on instance, every alert names its evidence and has promtool cases."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from telemetry.metrics_table import METRICS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2] / "dashboards"
PROM = ROOT / "prometheus"
DASHBOARDS = sorted(ROOT.glob("*.json"))
SEED_ALERTS = {
    "KvctlAllocatorExhaustion", "KvctlLockedCachePressure", "KvctlReferenceLeak",
    "KvctlMappingStall", "KvctlCompatibilityChurn", "KvctlStaleReceiptRace",
    "KvctlSecurityBoundaryPressure", "KvctlAdmissionCeiling", "KvctlHitRateCollapse",
}
_NAME = re.compile(r"(?<![A-Za-z0-9_:])((?:instance:)?kvctl_[a-z0-9_:]*)")


def _targets(dashboard: dict) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"]
            for target in panel.get("targets", [])]


def _rules(name: str) -> list[dict]:
    return [rule for group in yaml.safe_load((PROM / name).read_text())["groups"]
            for rule in group["rules"]]


def _known_names() -> set[str]:
    exposed = {spec.name for spec in METRICS}
    recorded = {rule["record"] for rule in _rules("recording.yml")}
    return exposed | recorded


def test_both_dashboards_exist():
    """The overview and the replay dashboard ship."""
    assert [p.name for p in DASHBOARDS] == ["kvctl-overview.json", "kvctl-replay.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_templated_on_instance(path):
    """An `instance` variable from label_values(kvctl_up, instance) filters every query."""
    dashboard = json.loads(path.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["instance"]["query"]["query"] == "label_values(kvctl_up, instance)"
    unfiltered = [title for title, expr in _targets(dashboard)
                  if 'instance=~"$instance"' not in expr]
    assert unfiltered == []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_queries_name_only_exported_or_recorded_metrics(path):
    """No panel query names a kvctl metric the exporter or the recording rules lack."""
    names = {n for _, expr in _targets(json.loads(path.read_text())) for n in _NAME.findall(expr)}
    assert names - _known_names() == set()


def test_overview_covers_the_panels_issue_5_lists():
    """Pool partition, U_KV vs token_usage, H_prefix, funnel and rejections, delta_ref and
    residual, mapping lag, evictions and retractions, offload traffic, active alerts."""
    titles = " | ".join(p["title"] for p in json.loads(
        (ROOT / "kvctl-overview.json").read_text())["panels"])
    for wanted in ("Pool partition", "U_KV vs token_usage", "H_prefix", "Funnel",
                   "Rejections by reason", "delta_ref", "Ledger residual", "Mapping lag",
                   "Evictions and retractions", "Offload traffic", "Active alerts"):
        assert wanted in titles


def test_pool_partition_panel_is_stacked():
    """The partition panel stacks the four ledger states."""
    panel = next(p for p in json.loads((ROOT / "kvctl-overview.json").read_text())["panels"]
                 if p["title"] == "Pool partition")
    assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"


def test_rules_name_only_exported_metrics():
    """Alert and recording expressions (and evidence annotations) use real metric names."""
    texts = [rule["expr"] for rule in _rules("alerts.yml") + _rules("recording.yml")]
    texts += [rule["annotations"]["evidence"] for rule in _rules("alerts.yml")]
    names = {n for text in texts for n in _NAME.findall(text)}
    assert names - _known_names() == set()


def test_every_seed_predicate_has_an_alert():
    """seed 000 0x0CF's seven joint predicates and seed 003's two alerts are all rules."""
    assert SEED_ALERTS <= {rule["alert"] for rule in _rules("alerts.yml")}


def test_every_alert_names_its_evidence_and_severity():
    """summary, description and evidence annotations and a severity label on every alert."""
    lacking = [rule["alert"] for rule in _rules("alerts.yml")
               if not {"summary", "description", "evidence"} <= set(rule["annotations"])
               or rule["labels"].get("severity") not in ("warning", "critical")]
    assert lacking == []


def test_every_alert_has_a_firing_and_a_quiet_promtool_case():
    """For each alert, some promtool test expects it firing and some expects it silent."""
    firing, quiet = set(), set()
    for path in sorted((PROM / "tests").glob("*.yml")):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = {rule["alert"] for rule in _rules("alerts.yml")}
    assert (alerts - firing, alerts - quiet) == (set(), set())


def test_the_fleet_row_is_evaluated_against_a_real_fleet():
    """The overview's fleet row (per-replica hit rate and pool states, replicas up/down, the
    router's requests per replica) reads only fleet families, so the real-Prometheus check
    of its queries runs against the sandbox fleet (tests/e2e/test_e2e_fleet_sandbox.py),
    and no other panel does (those run in tests/integration/test_prometheus_exporter.py)."""
    from support.dashboard_queries import is_fleet_query

    panels = json.loads((ROOT / "kvctl-overview.json").read_text())["panels"]
    start = next(k for k, p in enumerate(panels) if p["title"].startswith("Fleet"))
    row = [p for p in panels[start + 1:] if p["type"] != "row"]
    titles = " | ".join(p["title"] for p in row)
    for wanted in ("Hit rate per replica", "Pool states per replica", "Replicas up / down",
                   "Requests per replica"):
        assert wanted in titles
    assert all(is_fleet_query(t["expr"]) for p in row for t in p["targets"])
    before = [t["expr"] for p in panels[:start] for t in p.get("targets", [])]
    assert not any(is_fleet_query(expr) for expr in before)

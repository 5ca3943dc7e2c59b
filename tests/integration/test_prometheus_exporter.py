"""A real Prometheus scraping `kvctl exporter` running a shipped scenario on the embedded
engine: every dashboard panel query and every alert expression is evaluated through
Prometheus' HTTP API.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from support.dashboard_queries import HICACHE_METRIC, is_fleet_query, panel_queries
from support.telemetry_fixtures import ExporterProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None,
                       reason="prometheus not installed (apt-get install prometheus)"),
]

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "scenarios" / "multi-tenant-chat.yaml"
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RULE_FILES = [ROOT / "dashboards" / "prometheus" / n for n in ("alerts.yml", "recording.yml")]


def _free_port() -> int:
    """Below the ephemeral range, where no outgoing connection can take it first."""
    from kvctl.sandbox.ports import free_block

    return free_block(1)


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.fixture(scope="module")
def exporter():
    """`kvctl exporter` on the multi-tenant chat scenario; yields its host:port."""
    with ExporterProcess("--scenario", str(SCENARIO), "--interval", "0.5") as process:
        yield process.instance
    assert process.returncode == 0, process.stderr


@pytest.fixture(scope="module")
def prometheus(exporter, tmp_path_factory):
    """A real Prometheus on loopback scraping the exporter every second, with kvctl's rules."""
    workdir = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in RULE_FILES],
        "scrape_configs": [{"job_name": "kvctl", "static_configs": [{"targets": [exporter]}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = open(workdir / "prometheus.log", "w")
    process = subprocess.Popen(
        ["prometheus", f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            if process.poll() is not None:
                log_text = (workdir / "prometheus.log").read_text()
                raise AssertionError(f"prometheus exited: {log_text}")
            try:
                return urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200
            except (urllib.error.URLError, ConnectionError):
                return False

        _wait_for(ready, 60, "prometheus /-/ready")
        _wait_for(lambda: _query(base, "count_over_time(kvctl_up[1m]) >= 6"), 60,
                  "six scrapes of the exporter")
        _wait_for(lambda: _query(base, "instance:kvctl_prefix_hit:ratio_rate10m"), 30,
                  "recording rules to produce a sample")
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        log.close()


def _query_response(base: str, expr: str) -> dict:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        return _get_json(url)
    except urllib.error.HTTPError as err:  # 400 on a parse error: return its JSON body
        return json.loads(err.read())


def _query(base: str, expr: str) -> list:
    response = _query_response(base, expr)
    assert response["status"] == "success", (expr, response)
    return response["data"]["result"]


def _panel_queries(path: Path, instance: str) -> list[tuple[str, str]]:
    # HiCache panels need SGLang's HiCache: evaluated in tests/e2e/test_e2e_hicache.py; the
    # fleet row needs replicas behind a router: in tests/e2e/test_e2e_fleet_sandbox.py
    return [(name, expr) for name, expr in panel_queries(path, instance)
            if HICACHE_METRIC not in expr and not is_fleet_query(expr)]


def _alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULE_FILES[0].read_text())["groups"]
            for rule in group["rules"]]


def test_prometheus_scrapes_the_exporter(prometheus, exporter):
    """The target is up and kvctl_up is 1 in Prometheus' own view."""
    targets = _get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
    assert [(t["labels"]["instance"], t["health"]) for t in targets] == [(exporter, "up")]
    assert [r["value"][1] for r in _query(prometheus, "kvctl_up")] == ["1"]


def test_the_instance_variable_lists_the_exporter(prometheus, exporter):
    """label_values(kvctl_up, instance), the dashboards' template query, finds the target."""
    url = f"{prometheus}/api/v1/label/instance/values?match[]=kvctl_up"
    assert _get_json(url)["data"] == [exporter]


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_query_parses_and_returns_data(prometheus, exporter, dashboard):
    """Each target of each panel, with Grafana variables filled in, returns at least one
    series for this instance."""
    empty = [name for name, expr in _panel_queries(dashboard, exporter)
             if not _query(prometheus, expr)]
    assert empty == []


def test_every_alert_expression_evaluates(prometheus):
    """Each alert expression parses and evaluates (an empty result means: not firing)."""
    failed = [(rule["alert"], response.get("error"))
              for rule in _alert_rules()
              if (response := _query_response(prometheus, rule["expr"]))["status"] != "success"]
    assert failed == []


def test_every_metric_an_alert_reads_is_scraped(prometheus):
    """No alert can be silently blind: each kvctl series its expression names exists."""
    names = {name for rule in _alert_rules()
             for name in re.findall(r"\bkvctl_[a-z0-9_]+", rule["expr"])}
    missing = sorted(name for name in names if not _query(prometheus, f"count({name})"))
    assert missing == []


def test_rules_evaluate_without_errors(prometheus):
    """Prometheus reports every loaded rule healthy after evaluating it."""
    groups = _get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
    unhealthy = [(rule["name"], rule.get("lastError")) for group in groups
                 for rule in group["rules"] if rule["health"] != "ok"]
    assert len([r for g in groups for r in g["rules"]]) == 19  # 12 alerts + 7 recording
    assert unhealthy == []

"""promtool on the shipped rules and scrape config: check rules, check config, test rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("promtool") is None,
                       reason="promtool not installed (apt-get install prometheus)"),
]

PROM = Path(__file__).resolve().parents[2] / "dashboards" / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=PROM, capture_output=True, text=True,
                          timeout=120)


def test_check_rules_accepts_alerts_and_recording_rules():
    """promtool check rules: both rule files parse and every expression is valid PromQL."""
    result = _promtool("check", "rules", "alerts.yml", "recording.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 12 rules found" in result.stdout
    assert "SUCCESS: 7 rules found" in result.stdout


def test_check_config_accepts_the_example_scrape_config():
    """promtool check config: prometheus.yml and the rule files it loads are valid."""
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout


def test_rule_unit_tests_pass():
    """promtool test rules: every firing and quiet case in prometheus/tests/ passes."""
    tests = sorted(str(p.relative_to(PROM)) for p in (PROM / "tests").glob("*.yml"))
    assert len(tests) == 6
    result = _promtool("test", "rules", *tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(tests)


def test_rule_unit_tests_catch_a_wrong_threshold(tmp_path):
    """The tests can fail: with tau_high lowered to 0.87 the strict-ceiling case fails."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "alerts.yml").write_text(
        (PROM / "alerts.yml").read_text().replace("> 0.88", "> 0.87"))
    shutil.copy(PROM / "tests" / "capacity_test.yml", tmp_path / "tests")
    result = subprocess.run(["promtool", "test", "rules", "tests/capacity_test.yml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "admission ceiling stays quiet at exactly tau_high" in result.stdout + result.stderr


def test_source_down_tests_catch_a_missing_disjunct(tmp_path):
    """The KvctlSourceDown cases can fail: without `or kvctl_connected == 0` the
    connected-only case fails (each disjunct has its own firing case)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "alerts.yml").write_text(
        (PROM / "alerts.yml").read_text().replace(
            "kvctl_up == 0 or kvctl_connected == 0\n", "kvctl_up == 0\n"))
    shutil.copy(PROM / "tests" / "source_test.yml", tmp_path / "tests")
    result = subprocess.run(["promtool", "test", "rules", "tests/source_test.yml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "source down fires on kvctl_connected 0 alone" in result.stdout + result.stderr

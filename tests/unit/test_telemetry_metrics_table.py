"""The one metrics table: Prometheus naming rules, and the families the issue requires."""

from __future__ import annotations

import re

import pytest

from telemetry.metrics_table import METRICS, METRICS_BY_NAME

pytestmark = pytest.mark.unit

UNITS = ("tokens", "bytes", "seconds", "ratio")


def test_names_are_unique():
    """No family is defined twice."""
    assert len(METRICS_BY_NAME) == len(METRICS)


def test_every_name_has_the_prefix_and_is_a_valid_metric_name():
    """kvctl_ prefix, [a-z0-9_] only (no colons: those are for recording rules)."""
    bad = [s.name for s in METRICS if not re.fullmatch(r"kvctl_[a-z][a-z0-9_]*", s.name)]
    assert bad == []


def test_counters_and_only_counters_end_in_total():
    """Prometheus naming: a counter ends in _total, nothing else does."""
    wrong = [s.name for s in METRICS if (s.kind == "counter") != s.name.endswith("_total")]
    assert wrong == []


def test_info_families_end_in_info():
    """The info metric is exposed as <name>_info."""
    assert [s.name for s in METRICS if s.kind == "info"] == ["kvctl_engine_info"]


def test_units_are_the_last_word_of_the_name():
    """A name that mentions a unit ends with it (before _total): kvctl_x_tokens, not _tokens_x."""
    misplaced = []
    for spec in METRICS:
        words = spec.name.removesuffix("_total").split("_")
        misplaced += [spec.name for unit in UNITS if unit in words[:-1]]
    assert misplaced == []


def test_tenant_labels_are_declared_labels():
    """Only declared labels can be routed through the namespace labeler."""
    assert all(set(s.tenant_labels) <= set(s.labels) for s in METRICS)


def test_every_family_has_help_text():
    """HELP is never empty."""
    assert [s.name for s in METRICS if not s.help.strip()] == []


def test_issue_5_families_are_present():
    """The families issue 5 asks for exist under these names."""
    required = {
        "kvctl_pool_tokens", "kvctl_pool_residual_tokens", "kvctl_kv_utilization_ratio",
        "kvctl_sglang_token_usage_ratio", "kvctl_funnel_requests_total",
        "kvctl_funnel_rejections_total", "kvctl_prompt_tokens_total", "kvctl_hit_tokens_total",
        "kvctl_recomputed_tokens_total", "kvctl_delta_ref_max", "kvctl_delta_ref_nodes",
        "kvctl_mapping_lag_tokens", "kvctl_mapping_wait_seconds", "kvctl_evicted_tokens_total",
        "kvctl_evictions_total", "kvctl_retractions_total", "kvctl_offload_bytes_total",
        "kvctl_reload_bytes_total", "kvctl_alert_active", "kvctl_tree_nodes",
        "kvctl_tree_cached_tokens", "kvctl_engine_info", "kvctl_up",
    }
    assert required - set(METRICS_BY_NAME) == set()
    assert METRICS_BY_NAME["kvctl_pool_tokens"].labels == ("state",)
    assert METRICS_BY_NAME["kvctl_funnel_rejections_total"].labels == ("reason",)

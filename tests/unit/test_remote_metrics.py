"""Parsing SGLang's Prometheus exposition (engine_adapter/remote/metrics_scrape.py).

The text below uses SGLang 0.5.23's names and label sets (metrics_collector.py);
tests/integration/test_remote_engine.py parses what SGLang's own collectors render.
"""

from __future__ import annotations

import pytest

from engine_adapter.remote.metrics_scrape import parse_metrics

pytestmark = pytest.mark.unit

LABELS = 'engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0"'
TEXT = f"""# HELP sglang:kv_available_tokens Free slots.
# TYPE sglang:kv_available_tokens gauge
sglang:kv_available_tokens{{{LABELS},tp_rank="0"}} 240.0
sglang:kv_available_tokens{{{LABELS},tp_rank="1"}} 240.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{{LABELS},tp_rank="0",priority=""}} 5.0
sglang:num_queue_reqs{{{LABELS},tp_rank="0",priority="1"}} 3.0
# TYPE sglang:cached_tokens counter
sglang:cached_tokens_total{{cache_source="device",engine_type="unified",model_name="m"}} 30.0
sglang:cached_tokens_total{{cache_source="host",engine_type="unified",model_name="m"}} 12.0
# TYPE sglang:load_back_tokens counter
sglang:load_back_tokens_total{{{LABELS},tp_rank="0",pool="kv"}} 64.0
sglang:load_back_tokens_total{{{LABELS},tp_rank="0",pool="swa"}} 16.0
# TYPE sglang:token_usage gauge
sglang:token_usage{{{LABELS},tp_rank="0",dp_rank="0"}} 0.25
sglang:token_usage{{{LABELS},tp_rank="0",dp_rank="1"}} 0.75
# TYPE sglang:kv_used_tokens gauge
sglang:kv_used_tokens{{{LABELS},tp_rank="0",dp_rank="0"}} 100.0
sglang:kv_used_tokens{{{LABELS},tp_rank="0",dp_rank="1"}} 20.0
# TYPE vllm:other gauge
vllm:other 1.0
"""


def test_tp_ranks_of_one_cache_are_not_summed():
    """Every TP rank reports the same pool; the lowest rank is read once."""
    assert parse_metrics(TEXT).count("sglang:kv_available_tokens") == 240


def test_dp_ranks_are_summed():
    """Each attention-DP rank owns a pool: used tokens add up."""
    assert parse_metrics(TEXT).count("sglang:kv_used_tokens") == 120


def test_ratios_are_averaged_over_dp_ranks():
    """token_usage 0.25 and 0.75 over two equal DP ranks reads 0.5."""
    assert parse_metrics(TEXT).value("sglang:token_usage", reduce="mean") == 0.5


def test_priority_breakdown_is_not_double_counted():
    """The priority="" series is the total; per-priority series are skipped."""
    assert parse_metrics(TEXT).count("sglang:num_queue_reqs") == 5


def test_cache_sources_add_up():
    """cached_tokens_total by cache_source (device 30 + host 12) totals 42."""
    assert parse_metrics(TEXT).count("sglang:cached_tokens_total") == 42


def test_label_filter_selects_one_pool():
    """load_back_tokens_total{pool="kv"} excludes the swa pool."""
    assert parse_metrics(TEXT).count("sglang:load_back_tokens_total", where={"pool": "kv"}) == 64


def test_absent_metric_is_none():
    """A name the server does not export reads None, not 0."""
    assert parse_metrics(TEXT).value("sglang:kv_evictable_tokens") is None


def test_only_sglang_samples_are_kept():
    """Other engines' series are ignored."""
    assert "vllm:other" not in parse_metrics(TEXT).names()


def test_malformed_line_is_counted_and_the_rest_kept():
    """One broken line is counted and skipped; good lines around it still parse."""
    text = TEXT + "sglang:kv_evictable_tokens{oops 12\nsglang:page_size 16.0\n"
    reading = parse_metrics(text)
    assert (reading.malformed_lines, reading.count("sglang:page_size")) == (1, 16)
    assert reading.count("sglang:kv_available_tokens") == 240
    assert reading.first_malformed == "sglang:kv_evictable_tokens{oops 12"

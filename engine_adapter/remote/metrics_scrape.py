"""Read SGLang 0.5.23's Prometheus `/metrics` (`sglang:*`) into one frozen reading.

Where the names come from (`srt/observability/metrics_collector.py`):

- SchedulerMetricsCollector, labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank
  [, dp_rank][, priority]: `kv_available_tokens`, `kv_evictable_tokens`, `kv_used_tokens`,
  `token_usage`, `cache_hit_rate`, `num_running_reqs`, `num_queue_reqs`,
  `num_retracted_requests_total`, `max_total_num_tokens`, `page_size`,
  `hicache_host_used_tokens`, `hicache_host_total_tokens`, ...
- TokenizerMetricsCollector: `prompt_tokens_total{is_streaming}`,
  `generation_tokens_total`, `num_requests_total`, `cached_tokens_total{cache_source}`.
- RadixCacheMetricsCollector: `evicted_tokens_total`, `eviction_duration_seconds`
  (histogram), `load_back_tokens_total{pool}`, `hicache_backup_tokens_total{pool}`, ...

Aggregation (`MetricsReading.value`): TP/PP/EP ranks of one cache report the same logical
numbers ("read one rank rather than summing ranks", SGLang's own help text), so per series
the lowest (tp, pp, moe_ep) rank is kept; what remains (dp_rank, is_streaming, cache_source)
is summed, or averaged for ratios. Per-priority breakdowns (`priority` != "") are skipped:
the total is the `priority=""` series.

Malformed exposition lines are counted and skipped (the reading keeps every good sample).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from engine_adapter.remote.http_fetch import http_get

_RANK_LABELS = ("tp_rank", "pp_rank", "moe_ep_rank")


class MetricsUnavailable(Exception):
    """The server answers HTTP but has no usable `/metrics` (started without --enable-metrics)."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(frozen=True, kw_only=True)
class MetricsReading:
    samples: tuple[Sample, ...]
    malformed_lines: int = 0
    first_malformed: str | None = None

    def names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.samples)

    def value(
        self,
        name: str,
        *,
        where: dict[str, str] | None = None,
        reduce: Literal["sum", "mean"] = "sum",
    ) -> float | None:
        """Aggregate one sample name (module docstring); None when the server exports none."""
        groups: dict[tuple, tuple[tuple, float]] = {}
        for sample in self.samples:
            if sample.name != name:
                continue
            labels = dict(sample.labels)
            if labels.get("priority", ""):
                continue
            if where and any(labels.get(k) != v for k, v in where.items()):
                continue
            rank = tuple(_as_int(labels.get(k)) for k in _RANK_LABELS)
            rest = tuple(sorted((k, v) for k, v in labels.items() if k not in _RANK_LABELS))
            kept = groups.get(rest)
            if kept is None or rank < kept[0]:
                groups[rest] = (rank, sample.value)
        values = [v for _, v in groups.values() if not math.isnan(v)]
        if not values:
            return None
        return sum(values) / len(values) if reduce == "mean" else sum(values)

    def count(self, name: str, *, where: dict[str, str] | None = None) -> int | None:
        """`value` as an int (token and request counts); None when absent."""
        value = self.value(name, where=where)
        return None if value is None else int(round(value))


def parse_metrics(text: str, *, prefix: str = "sglang:") -> MetricsReading:
    """Parse Prometheus text exposition; keeps the samples named `prefix*` (SGLang's own
    `sglang:*` by default; sglang-router's `smg_*`), counts bad lines."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
        samples = [s for f in families for s in f.samples]
        return MetricsReading(samples=_keep(samples, prefix))
    except Exception:  # the parser stops at the first bad line: salvage line by line
        pass
    samples, malformed, first = [], 0, None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        try:
            samples.extend(
                s for f in text_string_to_metric_families(line + "\n") for s in f.samples
            )
        except Exception:
            malformed += 1
            first = first or line[:120]
    return MetricsReading(samples=_keep(samples, prefix), malformed_lines=malformed, first_malformed=first)


def scrape_metrics(base_url: str, *, timeout_s: float) -> MetricsReading:
    """GET `{base_url}/metrics` and parse it. Raises Unreachable or MetricsUnavailable."""
    status, body = http_get(f"{base_url}/metrics", timeout_s=timeout_s)
    if status != 200:
        raise MetricsUnavailable(f"{base_url}/metrics answered HTTP {status}")
    return parse_metrics(body.decode("utf-8", errors="replace"))


def _keep(samples, prefix: str) -> tuple[Sample, ...]:
    return tuple(
        Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
        for s in samples
        if s.name.startswith(prefix)
    )


def _as_int(raw: str | None) -> int:
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0

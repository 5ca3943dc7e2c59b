"""What a replay writes with `--out DIR`: report.json, timeline.csv and PNG plots.

Plots use matplotlib's object API on the Agg canvas (no pyplot global state, no display),
so sweep workers and tests can draw concurrently. Every file goes through
`kvctl.util.atomic`: a reader sees the old file or the whole new one, never half of it.

    DIR/report.json        the --json document
    DIR/timeline.csv       sampled per-step rows (kvctl.replay.timeline)
    DIR/utilization.png    U_KV and SGLang's token_usage over virtual time
    DIR/hit_rate.png       cumulative and windowed H_prefix over virtual time
    DIR/sweep.json, DIR/hit_rate_vs_pool.png, DIR/<run>/...   for sweeps
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from kvctl.replay.timeline import TimelineRow, to_csv
from kvctl.util.atomic import atomic_open, write_json

PNG_DPI = 110
ROLLING_SHARE = 40  # the rolling hit rate spans 1/40 of the timeline


def rolling_hit_rate(rows: Sequence[TimelineRow], span: int) -> list[float]:
    """Hit tokens / prompt tokens admitted over the last `span` samples (the previous value
    where nothing was admitted in that span)."""
    out: list[float] = []
    for index, row in enumerate(rows):
        start = rows[max(0, index - span)]
        prompt = row.prompt_tokens - start.prompt_tokens
        hits = row.hit_tokens - start.hit_tokens
        out.append(hits / prompt if prompt > 0 else (out[-1] if out else 0.0))
    return out


def _figure(title: str):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.0, 4.2), dpi=PNG_DPI, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _save(figure, path: Path) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    with atomic_open(path, "wb") as handle:
        handle.write(buffer.getvalue())


def _rate_axis(axes, values: Sequence[float]) -> None:
    """A 0-based ratio axis scaled to the data (small differences between policies stay
    visible), shown as percentages."""
    from matplotlib.ticker import PercentFormatter

    top = max(values, default=0.0)
    axes.set_ylim(0.0, min(1.02, max(0.01, top * 1.25)))
    axes.yaxis.set_major_formatter(PercentFormatter(1.0))


def plot_utilization(rows: Sequence[TimelineRow], path: Path, title: str) -> None:
    """U_KV (evictable counts as used) next to token_usage (evictable counts as free)."""
    figure, axes = _figure(f"KV pool utilization: {title}")
    times = [r.virtual_time_s for r in rows]
    axes.plot(times, [r.u_kv for r in rows], label="U_KV (seed 003 eq. 8)", linewidth=1.2)
    axes.plot(times, [r.token_usage for r in rows], label="SGLang token_usage", linewidth=1.2)
    axes.fill_between(times, [r.token_usage for r in rows], [r.u_kv for r in rows],
                      alpha=0.15, label="evictable (hidden from token_usage)")
    axes.set_xlabel("virtual time (s, modeled)")
    axes.set_ylabel("share of pool")
    axes.set_ylim(0.0, 1.02)
    axes.legend(loc="lower right", fontsize=8)
    _save(figure, path)


def plot_hit_rate(rows: Sequence[TimelineRow], path: Path, title: str) -> None:
    """Token hit rate H_prefix so far, and per sampling window."""
    figure, axes = _figure(f"prefix hit rate: {title}")
    times = [r.virtual_time_s for r in rows]
    span = max(1, len(rows) // ROLLING_SHARE)
    axes.plot(times, rolling_hit_rate(rows, span), label=f"rolling over {span} samples",
              linewidth=0.9, alpha=0.7)
    axes.plot(times, [r.hit_rate_cumulative for r in rows], label="cumulative H_prefix",
              linewidth=1.6)
    axes.set_xlabel("virtual time (s, modeled)")
    axes.set_ylabel("token hit rate")
    _rate_axis(axes, [r.hit_rate_cumulative for r in rows])
    axes.legend(loc="lower right", fontsize=8)
    _save(figure, path)


def plot_hit_rate_vs_pool(points: Sequence[tuple[str, int, float]], path: Path, title: str) -> None:
    """One line per policy label: hit rate against pool size in tokens."""
    figure, axes = _figure(f"hit rate vs pool size: {title}")
    by_label: dict[str, list[tuple[int, float]]] = {}
    for label, pool_tokens, hit_rate in points:
        by_label.setdefault(label, []).append((pool_tokens, hit_rate))
    for label, values in sorted(by_label.items()):
        values.sort()
        axes.plot([v[0] for v in values], [v[1] for v in values], marker="o", label=label)
    sizes = [p[1] for p in points]
    if sizes and max(sizes) > 8 * max(min(sizes), 1):
        axes.set_xscale("log")
    from matplotlib.ticker import FuncFormatter

    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    axes.set_xlabel("pool (tokens)")
    axes.set_ylabel("token hit rate")
    _rate_axis(axes, [p[2] for p in points])
    axes.legend(fontsize=8)
    _save(figure, path)


def write_outputs(directory: str | Path, document: dict, rows: Sequence[TimelineRow],
                  title: str) -> list[Path]:
    """Write one replay's files into `directory` (created); returns the paths written."""
    directory = Path(directory)
    paths = [directory / "report.json", directory / "timeline.csv",
             directory / "utilization.png", directory / "hit_rate.png"]
    write_json(paths[0], document)
    with atomic_open(paths[1]) as handle:
        handle.write(to_csv(list(rows)))
    plot_utilization(rows, paths[2], title)
    plot_hit_rate(rows, paths[3], title)
    return paths

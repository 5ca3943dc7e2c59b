"""curve.png: the hit-rate curve against pool size (log axis), with the ceiling, the
replay's pool, the pool the schedule holds from (below it: the arrival-order estimate) and
any exactly replayed points. matplotlib's object API on Agg, written
atomically (kvctl.replay.plots)."""

from __future__ import annotations

from pathlib import Path

from kvctl.replay.plots import _figure, _rate_axis, _save


def plot_curve(document: dict, path: Path, title: str) -> None:
    points = document["curve"]
    figure, axes = _figure(f"hit rate vs pool size, LRU assumed: {title}")
    axes.plot([p["pool_tokens"] for p in points], [p["hit_rate"] for p in points],
              linewidth=1.6, label="curve (stack distances)")
    ceiling = document["ceiling_hit_rate"]
    axes.axhline(ceiling, linestyle="--", linewidth=0.9, color="gray",
                 label=f"ceiling {ceiling:.2%}")
    axes.axvline(document["pool_tokens"], linestyle=":", linewidth=0.9, color="black",
                 label=f"your pool {document['pool_tokens']:,}")
    valid = document.get("schedule_valid_from_pool_tokens")
    if valid:
        axes.axvline(valid, linestyle="-.", linewidth=0.9, color="tab:orange",
                     label=f"event order from {valid:,} (arrival order below)")
    verified = document["verified"]
    if verified:
        axes.plot([v["pool_tokens"] for v in verified], [v["exact_hit_rate"] for v in verified],
                  "o", label=f"exact replay ({document['eviction_policy_verified']})")
    axes.set_xscale("log")
    from matplotlib.ticker import FuncFormatter

    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    axes.set_xlabel("pool (tokens)")
    axes.set_ylabel("token hit rate H_prefix")
    _rate_axis(axes, [p["hit_rate"] for p in points] + [ceiling])
    axes.legend(loc="upper left", fontsize=8)
    _save(figure, path)

"""The fleet sweep's plot: fleet hit rate and TTFT p99 against replicas, a line per router."""

from __future__ import annotations

from pathlib import Path


def write_sweep_plot(path: Path, ranked: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_router: dict[str, list[dict]] = {}
    for row in ranked:
        by_router.setdefault(row["router"], []).append(row)
    fig, (hit, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    for router, rows in sorted(by_router.items()):
        rows = sorted(rows, key=lambda r: r["replicas"])
        xs = [r["replicas"] for r in rows]
        hit.plot(xs, [100 * (r["hit_rate"] or 0) for r in rows], marker="o", label=router)
        ttft.plot(xs, [r["ttft_p99_s"] or 0 for r in rows], marker="o", label=router)
    hit.set_xlabel("replicas")
    hit.set_ylabel("fleet hit rate (%)")
    ttft.set_xlabel("replicas")
    ttft.set_ylabel("TTFT p99 (s, virtual clock, log scale)")
    ttft.set_yscale("log")
    for ax in (hit, ttft):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("kvctl fleet sweep")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

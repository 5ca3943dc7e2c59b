"""The `--curve` report: the table rows, the sizes to verify, and the --json document.

    table rows: your pool (the replay's resolved pool), then the smallest pools that reach
                50%, 80%, 90% and 95% of the ceiling, then the ceiling (unbounded)
    --json:     {"curve": [{"pool_tokens", "hit_rate"}, ...] (>= 50 log-spaced points),
                 "ceiling_hit_rate", "compulsory_miss_share", "uncacheable_share",
                 "table": [...], "verified": [...], "assumption": ...}

Verified points (--verify-points N) are exact replays at chosen sizes, run with the
replay's own settings (its eviction policy too); each row carries the curve's value, the
replay's, and their difference (curve - exact, in percentage points in the table).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvctl.replay.curve.profile import HitCurve

CEILING_SHARES = (0.5, 0.8, 0.9, 0.95)
CURVE_POINTS = 64


@dataclass(frozen=True, kw_only=True)
class TableRow:
    label: str
    pool_tokens: int | None  # None: unbounded
    hit_rate: float


@dataclass(frozen=True, kw_only=True)
class VerifiedPoint:
    pool_tokens: int
    curve_hit_rate: float
    exact_hit_rate: float

    @property
    def error(self) -> float:
        return self.curve_hit_rate - self.exact_hit_rate


def table_rows(curve: HitCurve, pool_tokens: int, pool_source: str) -> list[TableRow]:
    """Your pool, the sizes reaching each share of the ceiling, and the ceiling."""
    rows = [TableRow(label=f"your pool ({pool_source})", pool_tokens=pool_tokens,
                     hit_rate=curve.hit_rate(pool_tokens))]
    for share in CEILING_SHARES:
        size = curve.pool_for(share)
        if size is not None:
            rows.append(TableRow(label=f"{share:.0%} of ceiling", pool_tokens=size,
                                 hit_rate=curve.hit_rate(size)))
    rows.append(TableRow(label="ceiling (unbounded)", pool_tokens=None, hit_rate=curve.ceiling))
    return rows


def verify_sizes(rows: list[TableRow], count: int, smallest: int) -> list[int]:
    """Up to `count` distinct pool sizes to replay exactly, table sizes first (your pool,
    then 50/80/90/95%), each at least `smallest` tokens (an exact replay refuses a pool
    that cannot hold the largest request); more, if asked, halfway (geometric) between."""
    sizes: list[int] = []
    for row in rows:
        if row.pool_tokens is not None and row.pool_tokens >= smallest:
            if row.pool_tokens not in sizes:
                sizes.append(row.pool_tokens)
    ordered = sorted(sizes)
    while len(sizes) < count and len(ordered) >= 2:
        gaps = [(b / a, a, b) for a, b in zip(ordered, ordered[1:]) if b > a + 1]
        if not gaps:
            break
        _, low, high = max(gaps)
        middle = int((low * high) ** 0.5)
        sizes.append(middle)
        ordered = sorted(sizes)
    return sizes[:count]


def curve_document(curve: HitCurve, *, workload: dict, rows: list[TableRow],
                   verified: list[VerifiedPoint], pool_tokens: int, eviction_policy: str,
                   seconds: float) -> dict:
    """The --json document (before `versioned`)."""
    return {
        "kind": "curve",
        "workload": workload,
        "page_size": curve.page_size,
        "policy_assumption": "lru",
        "assumption": curve.assumption,
        "schedule_valid_from_pool_tokens": curve.anchor_tokens if curve.below is not None else None,
        "pool_tokens": pool_tokens,
        "eviction_policy_verified": eviction_policy,
        "prompt_tokens": curve.prompt_tokens,
        "page_accesses": curve.accesses,
        "ceiling_hit_rate": curve.ceiling,
        "compulsory_miss_share": curve.compulsory_share,
        "concurrent_miss_share": curve.concurrent_share,
        "uncacheable_share": curve.uncacheable_share,
        "table": [{"label": r.label, "pool_tokens": r.pool_tokens, "hit_rate": r.hit_rate}
                  for r in rows],
        "curve": [{"pool_tokens": size, "hit_rate": rate}
                  for size, rate in curve.points(CURVE_POINTS)],
        "verified": [{"pool_tokens": v.pool_tokens, "curve_hit_rate": v.curve_hit_rate,
                      "exact_hit_rate": v.exact_hit_rate, "error": v.error} for v in verified],
        "curve_seconds": round(seconds, 3),
    }

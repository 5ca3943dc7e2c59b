"""What a what-if shadow reports in a `Snapshot`: the estimated token hit rate at several
pool scales, and the trust check beside it (engine_adapter/instrument/whatif.py computes
it). Plain frozen dataclasses, no numpy, so every snapshot reader can import them.

`Snapshot.whatif` is None where a source cannot compute it (a remote server without the
plugin, a replay): "not observable", never 0.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class WhatIfPoint:
    pool_scale: float
    pool_tokens: int
    hit_rate: float | None  # None until a cacheable page was seen
    capped: bool  # the mini-cache hit its key bound: a lower bound


@dataclass(frozen=True, kw_only=True)
class WhatIfCurve:
    """The shadow's answer at one instant, plus the trust check: the sampled 1x point next to
    the hit rate the engine itself measured over the same requests."""

    points: tuple[WhatIfPoint, ...]
    sample_rate: float
    full_depth_pages: int
    requests: int
    prompt_tokens: int
    shadow_keys: int  # pages held across the mini-caches now
    max_keys: int
    measured_hit_rate: float | None  # the engine's own H over the same requests
    assumption: str = "LRU"
    # What the estimate away from 1x cannot model: the shadow replays the 1x engine's
    # events, so the running set (who runs at once, and cannot hit each other) is the 1x
    # pool's at every scale (instrument/whatif.py NOT_MODELED; docs/curve.md)
    not_modeled: tuple[str, ...] = ()

    def at(self, scale: float) -> WhatIfPoint | None:
        return next((p for p in self.points if p.pool_scale == scale), None)

    @property
    def error_1x(self) -> float | None:
        """Sampled 1x estimate minus the measured hit rate (None if either is unknown)."""
        point = self.at(1.0)
        if point is None or point.hit_rate is None or self.measured_hit_rate is None:
            return None
        return point.hit_rate - self.measured_hit_rate

    def gain_line(self, scale: float = 2.0) -> str:
        """'2x pool: 31.0% -> 37.2% (est., LRU; 1x measured 30.8%)', or why there is none."""
        now, then = self.at(1.0), self.at(scale)
        if now is None or then is None or now.hit_rate is None or then.hit_rate is None:
            return f"{scale:g}x pool: no estimate yet ({self.requests} requests seen)"
        measured = ("" if self.measured_hit_rate is None
                    else f"; 1x measured {self.measured_hit_rate:.1%}")
        capped = ", lower bound" if then.capped else ""
        return (f"{scale:g}x pool: {now.hit_rate:.1%} -> {then.hit_rate:.1%} "
                f"(est., {self.assumption}{capped}{measured})")

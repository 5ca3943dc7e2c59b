"""The live what-if shadow against the engine it shadows, on every shipped scenario, in one run.

Per scenario (examples/scenarios/*.yaml, the embedded engine with SGLang's real tree and
allocator, the scenario's engine settings, driven to the end of its workload):

    1. the shadow's 1x estimate (event-driven: instrument/whatif_events.py) against the hit
       rate the engine measured over the same requests
    2. its 2x estimate against an exact run of the same workload with twice the pool
       (the shadow off there), the engine's measured hit rate
    3. fed the same events, shadows at a fixed `--rate` and at rate 1 (every page: the
       model's error without sampling error), beside the engine's own (`fitted`: the rate
       raised while the sample fits the key bound, instrument/whatif.py fitted_rate)

Target (issue 34 item 2): |1x - measured| and |2x - exact 2x| within 2 points (`worst`:
the fitted shadow's). Printed,
never pinned (no test asserts these figures).

    PYTHONPATH=$PWD nice -n 19 .venv/bin/python benchmarks/bench_whatif.py [--seed 7]
        [--scenario NAME ...] [--rate 0.01]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCENARIOS = ROOT / "examples" / "scenarios"
TARGET_PP = 2.0


class _Feeds:
    """Several shadows fed by the same engine steps (the engine calls one feed)."""

    def __init__(self, feeds) -> None:
        self.feeds = feeds

    def after_step(self, batch) -> None:
        for feed in self.feeds:
            feed.after_step(batch)

    def flush_cache(self) -> None:
        for feed in self.feeds:
            feed.flush_cache()


def run_scenario(name: str, *, seed: int, scale: float, rate: float):
    """Drive scenario `name` to its end on an engine with `scale` x its pool; returns
    (measured hit rate, {label: shadow curve}): the engine's own shadow (`fitted`: the rate
    the feeds use, `rate` raised while the sample fits, instrument/whatif.py fitted_rate)
    and, fed the same events, shadows at a fixed `rate` and at rate 1 (no sampling: the
    model's own error). Empty at scale != 1 (the shadows off)."""
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.whatif_feed import WhatIfFeed
    from engine_adapter.instrument.whatif import WhatIfShadow
    from kvctl.replay.engine_setup import engine_config
    from kvctl.replay.scenario import load_scenario

    path = SCENARIOS / f"{name}.yaml"
    defaults = dict(load_scenario(path).engine_defaults)
    pool = int(defaults.pop("pool_tokens") * scale)
    config = engine_config(pool_tokens=pool, namespace_salt="bench", **defaults)
    config = dataclasses.replace(config, whatif_rate=rate if scale == 1.0 else 0.0)
    engine = EmbeddedEngine(config)
    st = engine._st
    shadows = {}
    if st.whatif is not None:
        shadows["fitted"] = st.whatif
        feeds = [st.whatif_feed]
        # the rate-1 reference gets room for every page of 8x the pool (never capped)
        whole = int(max(st.whatif.scales) * pool / config.page_size) + 1
        for label, fixed, bound in (("fixed", rate, st.whatif.max_keys // len(st.whatif.scales)),
                                    ("rate 1", 1.0, max(whole, 1 << 13))):
            shadows[label] = WhatIfShadow(pool_tokens=pool, page_size=config.page_size,
                                          rate=fixed, seed=st.whatif._salt.item(),
                                          max_keys_per_scale=bound)
            feeds.append(WhatIfFeed(st, shadows[label]))
        st.whatif_feed = _Feeds(feeds)
    driver = load_scenario(path, seed=seed)
    driver.prime(engine)
    while engine.has_work() or not driver.exhausted():
        next_event = getattr(driver, "next_event_s", None)
        report = engine.step(horizon_s=next_event() if next_event else None)
        driver.after_step(engine, report)
    counters = engine.snapshot().counters
    measured = counters.hit_tokens / counters.prompt_tokens
    return measured, {label: shadow.curve() for label, shadow in shadows.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--scenario", nargs="*",
                        default=sorted(p.stem for p in SCENARIOS.glob("*.yaml")))
    args = parser.parse_args()
    print(f"what-if shadow vs the engine, seed {args.seed}, rate {args.rate}, target "
          f"{TARGET_PP} pp")
    print(f"{'scenario':<19}{'req':>5}{'meas 1x':>8}{'exact 2x':>9}"
          + "".join(f"{label + ' 1x/2x (err)':>27}" for label in ("fitted", "fixed", "rate 1"))
          + f"{'fit rate':>9}{'s':>5}")
    worst = 0.0
    for name in args.scenario:
        started = time.perf_counter()
        measured, curves = run_scenario(name, seed=args.seed, scale=1.0, rate=args.rate)
        exact2, _ = run_scenario(name, seed=args.seed, scale=2.0, rate=args.rate)
        row = f"{name:<19}{curves['fitted'].requests:>5}{measured:>8.1%}{exact2:>9.1%}"
        for label in ("fitted", "fixed", "rate 1"):
            est1, est2 = curves[label].at(1.0).hit_rate, curves[label].at(2.0).hit_rate
            e1, e2 = (est1 - measured) * 100, (est2 - exact2) * 100
            if label == "fitted":
                worst = max(worst, abs(e1), abs(e2))
            row += f"{est1:>8.1%}/{est2:>6.1%} ({e1:+.1f},{e2:+.1f})".rjust(27)
        row += f"{curves['fitted'].sample_rate:>9.3g}{time.perf_counter() - started:>5.0f}"
        print(row, flush=True)
        own = curves["fitted"].measured_hit_rate
        if own is not None and abs(own - measured) > 1e-9:
            print(f"  (the shadow's own measured figure: {own:.2%})")
    print(f"worst |error| {worst:.1f} pp (target {TARGET_PP})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

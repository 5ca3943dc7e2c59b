"""The live what-if shadow against the engine it shadows, on every shipped scenario, in one run.

Per scenario (examples/scenarios/*.yaml, the embedded engine with SGLang's real tree and
allocator, the scenario's engine settings, driven to the end of its workload):

    1. the shadow's 1x estimate (event-driven: instrument/whatif_events.py) against the hit
       rate the engine measured over the same requests
    2. its 2x estimate against an exact run of the same workload with twice the pool
       (the shadow off there), the engine's measured hit rate
    3. the arrival-order model it replaced (the same shadow fed each prompt at its funnel
       record, the whole request inserted at once) at 1x and 2x, for comparison

Target (issue 34 item 2): |1x - measured| and |2x - exact 2x| within 2 points. Printed,
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


def run_scenario(name: str, *, seed: int, scale: float, rate: float):
    """Drive scenario `name` to its end on an engine with `scale` x its pool; returns
    (measured hit rate, the engine's shadow curve or None, the arrival-order shadow's)."""
    from engine_adapter.embedded.engine import EmbeddedEngine
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
    arrival = None
    if st.whatif is not None:  # the model it replaced, fed as the old feed fed it
        arrival = WhatIfShadow(pool_tokens=pool, page_size=config.page_size, rate=rate,
                               seed=st.whatif._salt.item())

        def observe(tracked) -> None:
            arrival.observe_tokens(tracked.req.origin_input_ids, block_ids=tracked.spec.block_ids,
                                   namespace=tracked.namespace_label,
                                   output_tokens=tracked.spec.max_new_tokens,
                                   cached_tokens=tracked.facts.s_runtime)

        st.funnel.observers.append(observe)
    driver = load_scenario(path, seed=seed)
    driver.prime(engine)
    while engine.has_work() or not driver.exhausted():
        next_event = getattr(driver, "next_event_s", None)
        report = engine.step(horizon_s=next_event() if next_event else None)
        driver.after_step(engine, report)
    counters = engine.snapshot().counters
    measured = counters.hit_tokens / counters.prompt_tokens
    shadow = st.whatif.curve() if st.whatif is not None else None
    return measured, shadow, arrival.curve() if arrival is not None else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--scenario", nargs="*",
                        default=sorted(p.stem for p in SCENARIOS.glob("*.yaml")))
    args = parser.parse_args()
    print(f"what-if shadow vs the engine, seed {args.seed}, rate {args.rate}, target "
          f"{TARGET_PP} pp")
    print(f"{'scenario':<20}{'req':>6}{'meas 1x':>9}{'est 1x':>8}{'err':>7}"
          f"{'exact 2x':>10}{'est 2x':>8}{'err':>7}{'old 1x':>8}{'old 2x':>8}{'s':>6}")
    worst = 0.0
    for name in args.scenario:
        started = time.perf_counter()
        measured, shadow, arrival = run_scenario(name, seed=args.seed, scale=1.0, rate=args.rate)
        exact2, _, _ = run_scenario(name, seed=args.seed, scale=2.0, rate=args.rate)
        est1, est2 = shadow.at(1.0).hit_rate, shadow.at(2.0).hit_rate
        e1, e2 = (est1 - measured) * 100, (est2 - exact2) * 100
        worst = max(worst, abs(e1), abs(e2))
        print(f"{name:<20}{shadow.requests:>6}{measured:>9.1%}{est1:>8.1%}{e1:>+7.1f}"
              f"{exact2:>10.1%}{est2:>8.1%}{e2:>+7.1f}{arrival.at(1.0).hit_rate:>8.1%}"
              f"{arrival.at(2.0).hit_rate:>8.1%}{time.perf_counter() - started:>6.0f}",
              flush=True)
        if shadow.measured_hit_rate is not None and abs(shadow.measured_hit_rate - measured) > 1e-9:
            print(f"  (the shadow's own measured figure: {shadow.measured_hit_rate:.2%})")
    print(f"worst |error| {worst:.1f} pp (target {TARGET_PP})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

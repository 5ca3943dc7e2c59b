"""The hit-rate curve (`kvctl replay --curve`) against exact replays, in one run.

Prints, measured in this run, for --trace (default: the shipped Mooncake hour):

    1. curve time / one unbounded replay's time (target <= 1.5): the curve's whole work
       (the stream, its unbounded schedule replay with the recorder, both passes) against
       a plain `kvctl replay --pool-tokens 0` (prepare + run, engine build included) on the
       same trace, timed before and after the curve (the machine's load moves both); a
       20-request replay first pays SGLang's import and the engine's compiles, and
       numba's compile of the passes is timed apart (cached on disk after a run)
    2. the curve as `--curve` prints it (event order; below the schedule's peak, a
       schedule synthesized at the pool, synth.py) and the arrival-order pass (`--curve-order
       arrival`) against exact replays (`kvctl replay --pool-tokens N`, lru) at --pools
       (default: the default pool and the pools reaching 50/80/90/95% of the ceiling);
       every difference and the worst (target: within 1 percentage point)
    3. the live shadow at its default 1% against the arrival-order curve at 0.25x .. 8x
       the default pool, over --seeds salts: the worst difference (the bound tests state)
       and the shadow's keys and traced memory

    .venv/bin/python benchmarks/bench_curve.py [--trace T.jsonl] [--limit N] [--pools A,B]
                                               [--parallel 2] [--seeds 8] [--skip-exact]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TRACE = ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl"
TARGET_TIME, TARGET_PP = 1.5, 1.0


def timed_curve(trace, limit):
    """Both curves and the parts of the event-ordered one's time."""
    import numpy as np

    from kvctl.replay.curve.distance import stack_distances
    from kvctl.replay.curve.profile import build_curve
    from kvctl.replay.curve.schedule import ScheduleRecorder
    from kvctl.replay.curve.scheduled import MATCH, event_distances
    from kvctl.replay.curve.stream import mooncake_stream
    from kvctl.replay.runner import ReplaySettings, prepare, run

    started = time.perf_counter()
    stack_distances(np.array([1, 2, 1]), np.array([0, 2, 3]))  # compile (or load the cache)
    event_distances(np.array([1]), np.array([0, 1]), np.array([1]), np.array([0]),
                    np.array([MATCH]), np.array([0]))
    compiled = time.perf_counter()
    stream = mooncake_stream(trace, page_size=16, limit=limit)
    streamed = time.perf_counter()
    prepared = prepare(ReplaySettings(workload=str(trace), pool_tokens=0, limit=limit))
    recorder = ScheduleRecorder(stream.rids, stream.arrival_s, prepared.resolved["pool_tokens"])
    run(prepared, on_finished=recorder, on_engine=recorder.attach)
    replayed = time.perf_counter()
    curve = build_curve(stream, recorder.schedule())
    done = time.perf_counter()
    arrival = build_curve(stream)
    schedule = recorder.schedule()

    def printed(pool):  # what --curve prints at `pool` (kvctl/cli/replay_curve.py)
        from kvctl.replay.curve.synth import synthesized_hit_rate

        if pool >= curve.anchor_tokens:
            return curve.hit_rate(pool), 0.0
        begun = time.perf_counter()
        rate = synthesized_hit_rate(stream, schedule, prepared.config, pool)
        return rate, time.perf_counter() - begun

    return curve, arrival, printed, {"compile_s": compiled - started,
                                     "stream_s": streamed - compiled,
                                     "schedule_s": replayed - streamed, "pass_s": done - replayed,
                                     "accesses": stream.accesses,
                                     "peak_running": schedule.peak_running}


def timed_replay(trace, limit, pool):
    from kvctl.replay.runner import ReplaySettings, prepare, run

    started = time.perf_counter()
    result = run(prepare(ReplaySettings(workload=str(trace), pool_tokens=pool, limit=limit)))
    return result.report.to_dict(), time.perf_counter() - started


def shadow_errors(curve, pool, seeds, limit, trace=TRACE):
    import numpy as np

    from engine_adapter.instrument.whatif import POOL_SCALES, WhatIfShadow
    from kvctl.replay.mooncake import iter_records

    worst, rows = 0.0, []
    for seed in range(seeds):
        tracemalloc.start()
        shadow = WhatIfShadow(pool_tokens=pool, page_size=16, seed=1000 + seed)
        started = time.perf_counter()
        for record in iter_records(trace, limit=limit):
            shadow.observe_tokens(np.zeros(record.input_length), block_ids=record.hash_ids,
                                  output_tokens=record.output_length)
        seconds = time.perf_counter() - started
        memory = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        est = shadow.curve()
        errors = [p.hit_rate - curve.hit_rate(int(s * pool)) for s, p in zip(POOL_SCALES, est.points)]
        worst = max(worst, max(abs(e) for e in errors))
        rows.append((seed, errors, est.shadow_keys, memory, seconds, est.requests))
    return worst, rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help="a Mooncake trace")
    parser.add_argument("--limit", type=int, default=None, help="requests from the trace head")
    parser.add_argument("--pools", default=None, help="pool sizes to replay exactly (a,b,...)")
    parser.add_argument("--parallel", type=int, default=2, help="exact replays at once")
    parser.add_argument("--seeds", type=int, default=8, help="shadow salts to try")
    parser.add_argument("--skip-exact", action="store_true", help="no exact comparison")
    parser.add_argument("--skip-ratio", action="store_true", help="no plain unbounded replay")
    args = parser.parse_args(argv)

    from kvctl.replay.curve.document import table_rows
    from kvctl.replay.engine_setup import Deployment

    timed_replay(args.trace, 20, 0)  # warm: SGLang's import, the engine's compiles
    if not args.skip_ratio:
        report, before_s = timed_replay(args.trace, args.limit, 0)
    curve, arrival, printed, parts = timed_curve(args.trace, args.limit)
    curve_s = parts["stream_s"] + parts["schedule_s"] + parts["pass_s"]
    print(f"{args.trace.name} (limit {args.limit}): {parts['accesses']:,} page accesses; "
          f"stream {parts['stream_s']:.1f} s + schedule replay {parts['schedule_s']:.1f} s + "
          f"passes {parts['pass_s']:.1f} s = {curve_s:.1f} s (numba compile/load "
          f"{parts['compile_s']:.1f} s, apart); peak running {parts['peak_running']}; "
          f"valid from {curve.anchor_tokens:,} tokens", flush=True)
    if not args.skip_ratio:
        report, after_s = timed_replay(args.trace, args.limit, 0)
        replay_s = (before_s + after_s) / 2
        print(f"plain unbounded replay: {before_s:.1f} s before, {after_s:.1f} s after the "
              f"curve, H {report['hit_rate']:.4%} (curve ceiling {curve.ceiling:.4%})",
              flush=True)
        ratio = curve_s / replay_s
        print(f"ratio curve / unbounded replay: {ratio:.3f}  -> "
              f"{'meets' if ratio <= TARGET_TIME else 'misses'} the <= {TARGET_TIME} target",
              flush=True)

    default = Deployment().pool_tokens(16)
    if not args.skip_exact:
        from dataclasses import replace

        from kvctl.replay import sweep as sweeps
        from kvctl.replay.runner import ReplaySettings

        if args.pools:
            rows = [(f"pool {int(p):,}", int(p)) for p in args.pools.split(",")]
        else:
            rows = [(r.label, r.pool_tokens) for r in table_rows(curve, default, "default")
                    if r.pool_tokens is not None]
        base = ReplaySettings(workload=str(args.trace), limit=args.limit)
        runs = [replace(base, pool_tokens=pool, label=label) for label, pool in rows]
        started = time.perf_counter()
        outcomes = sweeps.run_sweep(runs, parallel=args.parallel)
        print(f"\n{len(runs)} exact replays in {time.perf_counter() - started:.0f} s "
              f"(--parallel {args.parallel})")
        print(f"{'size':>22} {'pool tokens':>12} {'curve':>8} {'exact':>8} {'diff':>9}"
              f" {'arrival':>8} {'diff':>9}")
        worst = worst_arrival = 0.0
        for (label, pool), outcome in zip(rows, outcomes):
            exact = outcome.result.report.to_dict()["hit_rate"]
            estimate, synth_s = printed(pool)
            diff = (estimate - exact) * 100
            old = (arrival.hit_rate(pool) - exact) * 100
            worst, worst_arrival = max(worst, abs(diff)), max(worst_arrival, abs(old))
            where = ("" if pool >= curve.anchor_tokens else
                     f"  (below the schedule's peak: synthesized schedule, {synth_s:.1f} s;"
                     f" the curve's point {curve.hit_rate(pool):.2%})")
            print(f"{label:>22} {pool:>12,} {estimate:8.2%} {exact:8.2%} "
                  f"{diff:+8.2f}pp {arrival.hit_rate(pool):8.2%} {old:+8.2f}pp{where}")
        print(f"worst difference {worst:.2f} pp (arrival order: {worst_arrival:.2f} pp) -> "
              f"{'meets' if worst <= TARGET_PP else 'misses'} the <= {TARGET_PP} pp target")

    if args.seeds:
        worst, rows = shadow_errors(arrival, default, args.seeds, args.limit, args.trace)
        print(f"\nshadow at 1% vs the arrival-order curve, pool {default:,}, scales 0.25..8x:")
        for seed, errors, keys, memory, seconds, requests in rows:
            cells = " ".join(f"{e * 100:+.2f}" for e in errors)
            print(f"  salt {seed}: {cells} pp   {keys:,} keys, {memory / 2**20:.1f} MiB traced, "
                  f"{1e6 * seconds / requests:.0f} us/request")
        print(f"worst |difference| over {len(rows)} salts: {worst * 100:.3f} pp")
    return 0


if __name__ == "__main__":
    sys.exit(main())

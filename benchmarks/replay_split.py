"""Where kvctl's replay loop spends its time: inside SGLang's cache calls, or in kvctl.

`bench_replay.py` compares kvctl's loop with the bare loop (one match / alloc / insert /
unlock per request). Part of the gap is not kvctl's overhead but the fidelity contract:
kvctl makes the calls SGLang's scheduler makes (a chunked prefill's extend and checkpoint
insert per chunk, a decode allocation per step, `check_decode_mem`, the finish insert),
and those cost what they cost in SGLang. This benchmark runs both loops in this process
under cProfile, after the engine is built (imports excluded), and splits kvctl's loop by
call edge:

    SGLang calls   time of SGLang functions called from kvctl's code (cumulative, so it
                   includes torch, numpy and the Rust tree core below them, and kvctl's
                   CPU extend kernel, which SGLang's allocator calls)
    kvctl's own    the rest of the loop: kvctl's scheduling, bookkeeping, instrumentation

and prints each over the bare loop's time under the same profiler. cProfile inflates
Python-heavy code more than native calls, so read the shares, not the absolute seconds.

`--timers` measures the same split without a profiler: perf_counter wrappers around the
SGLang entry points kvctl calls (benchmarks/sglang_timers.py, outermost call only), with
the loops running at full speed; the bare loop is timed plainly.

    .venv/bin/python benchmarks/replay_split.py [--limit 2000] [--pool default|0|TOKENS] [--timers]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl"
KVCTL_DIRS = (str(ROOT / "engine_adapter"), str(ROOT / "kvctl"))
CALLBACKS = ("instrument/probes.py", "embedded/alloc_kernel.py")  # kvctl code SGLang calls


def _is_kvctl(filename: str) -> bool:
    return filename.startswith(KVCTL_DIRS) and not filename.endswith(CALLBACKS)


def sglang_call_seconds(stats: pstats.Stats) -> float:
    """Cumulative seconds of SGLang functions on edges whose caller is kvctl's code."""
    total = 0.0
    for (filename, _line, _name), (_cc, _nc, _tt, _ct, callers) in stats.stats.items():
        if "/sglang/" not in filename:
            continue
        for (caller_file, _l, _n), edge in callers.items():
            if _is_kvctl(caller_file):
                total += edge[3]
    return total


def profiled(fn) -> tuple[float, pstats.Stats]:
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    stats = pstats.Stats(profile)
    return stats.total_tt, stats


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--pool", default="default", help="default, 0 (unbounded) or tokens")
    parser.add_argument("--timers", action="store_true",
                        help="perf_counter wrappers instead of cProfile")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bare_loop

    from engine_adapter.embedded.engine import EmbeddedEngine
    from kvctl.replay.runner import ReplaySettings, prepare, run

    pool = None if args.pool == "default" else int(args.pool)
    prepared = prepare(ReplaySettings(workload=str(TRACE), limit=args.limit, pool_tokens=pool))
    EmbeddedEngine(prepared.config)  # imports and first build outside the profile
    result: dict = {}
    if args.timers:
        from sglang_timers import Timers

        timers = Timers()
        timers.install()
        kvctl_s = timed(lambda: result.setdefault("doc", run(prepared).report.to_dict()))
        timers.uninstall()
        in_sglang, how = timers.seconds, f"timed by wrappers ({timers.calls:,} SGLang calls)"
    else:
        kvctl_s, stats = profiled(lambda: result.setdefault("doc", run(prepared).report.to_dict()))
        in_sglang, how = sglang_call_seconds(stats), "all under cProfile"
    pool_tokens = result["doc"]["settings"]["pool_tokens"]
    bare_loop.build(pool_tokens, prepared.config.page_size)  # warm, outside the measurement
    bare = lambda: bare_loop.run(str(TRACE), pool_tokens, prepared.config.page_size, args.limit)  # noqa: E731
    bare_s = timed(bare) if args.timers else profiled(bare)[0]
    own = kvctl_s - in_sglang
    print(f"first {args.limit} requests, pool {pool_tokens:,} tokens, {how}")
    print(f"  bare loop            {bare_s:7.1f} s   1.00")
    print(f"  kvctl replay (run)   {kvctl_s:7.1f} s   {kvctl_s / bare_s:5.2f}x bare")
    print(f"    SGLang's calls     {in_sglang:7.1f} s   {in_sglang / bare_s:5.2f}x bare "
          f"({in_sglang / kvctl_s:.0%} of kvctl's loop)")
    print(f"    kvctl's own code   {own:7.1f} s   {own / bare_s:5.2f}x bare "
          f"({own / kvctl_s:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cost of kvctl's instrumentation on the embedded engine, on a slice of the Mooncake trace.

Runs the first N requests (default 400) of the shipped Mooncake trace through the embedded
engine (SGLang's UnifiedRadixCache, Rust core, NoOp KV pool) twice per round: with
`EngineConfig(instrument=True)` (content oracle + counterfactual funnel) and with
`instrument=False` (`NullOracle`), everything else identical, alternating the order each
round so drift on a shared machine hits both alike. For each it prints engine steps/s and
prompt tokens/s (wall clock, engine build excluded), then the ratio of the instrumented run
time to the plain one (median over rounds). Target: ratio <= 1.10.

    .venv/bin/python benchmarks/bench_engine.py [--limit 400] [--rounds 3] [--pool-tokens N]

The trace is replayed by `kvctl.replay.mooncake.MooncakeDriver` (hash id b -> tokens
1 + 512 b + j, the last block partial, arrival = timestamp / 1000 s). Speed is reported,
never enforced; exit status 1 only if the two runs disagree on what they computed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRACE = Path(__file__).resolve().parents[1] / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl"
TARGET_RATIO = 1.10


def run_once(*, instrument: bool, limit: int, pool_tokens: int) -> dict:
    """One replay; returns wall seconds, engine steps, prompt tokens and what it computed."""
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.workload import drive
    from kvctl.replay.mooncake import MooncakeDriver

    engine = EmbeddedEngine(EngineConfig(
        pool_tokens=pool_tokens, page_size=16, token_budget=8_192, max_context_len=131_072,
        max_running_requests=256, tree_core="rust", kv_pool="noop", instrument=instrument,
    ))
    driver = MooncakeDriver(TRACE, limit=limit)
    started = time.perf_counter()
    steps = drive(engine, driver)
    wall = time.perf_counter() - started
    counters = engine.snapshot().counters
    return {
        "wall_s": wall,
        "steps": steps,
        "requests": counters.requests_finished,
        "prompt_tokens": counters.prompt_tokens if instrument else None,
        "decode_tokens": counters.decode_tokens,
        "evictions": counters.evictions,
        "prompt_tokens_submitted": _prompt_tokens(limit),
    }


def _prompt_tokens(limit: int) -> int:
    from kvctl.replay.mooncake import iter_records

    return sum(r.input_length for r in iter_records(TRACE, limit=limit))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=400, help="requests from the trace head")
    parser.add_argument("--rounds", type=int, default=3, help="instrumented/plain pairs")
    parser.add_argument("--pool-tokens", type=int, default=131_072,
                        help="KV pool token slots (default: 16 GiB of Llama-3-8B K/V)")
    args = parser.parse_args(argv)

    import sglang.srt.mem_cache.unified_radix_cache  # noqa: F401  (import outside the timing)

    runs: dict[bool, list[dict]] = {True: [], False: []}
    for index in range(args.rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        for instrument in order:
            result = run_once(instrument=instrument, limit=args.limit, pool_tokens=args.pool_tokens)
            runs[instrument].append(result)
            label = "on " if instrument else "off"
            print(f"round {index + 1} instrumentation {label}: {result['wall_s']:7.2f} s, "
                  f"{result['steps']:,} steps, {result['requests']:,} requests", flush=True)

    on, off = runs[True], runs[False]
    if {(r["steps"], r["requests"], r["decode_tokens"]) for r in on + off} != {
            (on[0]["steps"], on[0]["requests"], on[0]["decode_tokens"])}:
        print("error: instrumented and plain runs did not compute the same schedule")
        return 1
    steps, prompt = on[0]["steps"], on[0]["prompt_tokens_submitted"]
    print(f"\nMooncake slice: first {args.limit} requests, {prompt:,} prompt tokens, "
          f"{on[0]['decode_tokens']:,} output tokens, {steps:,} engine steps, "
          f"{on[0]['evictions']:,} evictions, pool {args.pool_tokens:,} tokens")
    medians = {}
    for instrument, results in ((True, on), (False, off)):
        wall = statistics.median(r["wall_s"] for r in results)
        medians[instrument] = wall
        label = "instrumentation on " if instrument else "instrumentation off"
        print(f"{label}: {steps / wall:9.1f} steps/s  {prompt / wall:12,.0f} prompt tokens/s  "
              f"(median of {len(results)} runs, {wall:.2f} s)")
    ratio = medians[True] / medians[False]
    verdict = "meets" if ratio <= TARGET_RATIO else "misses"
    print(f"ratio on/off (wall time): {ratio:.3f}  -> {verdict} the <= {TARGET_RATIO:.2f} target")
    return 0


if __name__ == "__main__":
    sys.exit(main())

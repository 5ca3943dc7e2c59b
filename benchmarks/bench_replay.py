"""Replay the whole shipped Mooncake trace through `kvctl replay`'s runner, per tree core.

For each SGLang radix tree core (Rust, Python) it runs the same replay (default deployment
Llama-3-8B on one H100-SXM, the pool `kvctl size` gives it unless --pool-tokens is set) and
prints wall time (engine build excluded), requests/s, prompt tokens/s, the hit rate, and
the ratio of the wall time to the 60 s target; then the Python/Rust speed ratio. The hit
rate is printed next to the direct computation over the trace's hash ids (an infinite
cache, trace order, no in-flight effect) for reference.

    .venv/bin/python benchmarks/bench_replay.py [--limit N] [--pool-tokens N] [--cores rust,python]
                                                [--decode-quantum Q]

Speed is reported, never enforced (tests never assert wall-clock times).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRACES = Path(__file__).resolve().parents[1] / "examples" / "traces" / "mooncake"
TRACE = TRACES / "conversation_trace.jsonl"
TARGET_S = 60.0


def direct_hit_rate(limit: int | None) -> float:
    """Longest run of previously seen leading hash ids x 512, capped at the input length."""
    seen: set[int] = set()
    hits = prompt = 0
    with open(TRACE) as handle:
        for number, text in enumerate(handle):
            if limit is not None and number >= limit:
                break
            line = json.loads(text)
            ids = line["hash_ids"]
            run = 0
            while run < len(ids) and ids[run] in seen:
                run += 1
            hits += min(run * 512, line["input_length"])
            prompt += line["input_length"]
            seen.update(ids)
    return hits / prompt


def replay(core: str, limit: int | None, pool_tokens: int | None, quantum: int | None) -> dict:
    from kvctl.replay.runner import ReplaySettings, prepare, run

    settings = ReplaySettings(workload=str(TRACE), tree_core=core, limit=limit,
                              pool_tokens=pool_tokens, decode_quantum=quantum)
    started = time.monotonic()
    result = run(prepare(settings))
    document = result.report.to_dict()
    document["wall_clock"]["total_seconds"] = time.monotonic() - started
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    parser.add_argument("--pool-tokens", type=int, default=None, help="0 = unbounded")
    parser.add_argument("--cores", default="rust,python")
    parser.add_argument("--decode-quantum", type=int, default=None,
                        help="decode tokens per request per step (default 1: SGLang's path)")
    args = parser.parse_args()

    print(f"trace {TRACE.name}" + (f", first {args.limit} requests" if args.limit else ""))
    print(f"direct hit rate (infinite cache, trace order): {direct_hit_rate(args.limit):.4f}")
    walls = {}
    for core in [c.strip() for c in args.cores.split(",") if c.strip()]:
        doc = replay(core, args.limit, args.pool_tokens, args.decode_quantum)
        wall = doc["wall_clock"]
        walls[core] = wall["replay_seconds"]
        print(f"[{core:6}] pool {doc['settings']['pool_tokens']:,} tokens  "
              f"decode quantum {doc['settings']['decode_quantum']}  "
              f"requests {doc['requests']:,}  steps {doc['steps']:,}  "
              f"hit rate {doc['hit_rate']:.4f}  evictions {doc['evictions']:,}  "
              f"integrity {'ok' if doc['integrity_ok'] else 'FAILED'}")
        print(f"[{core:6}] replay wall {wall['replay_seconds']:.1f} s (engine build "
              f"{wall['engine_build_seconds']:.1f} s, total {wall['total_seconds']:.1f} s)  "
              f"{wall['requests_per_second']:.1f} requests/s  "
              f"{wall['prompt_tokens_per_second']:,.0f} prompt tokens/s  "
              f"target ratio {wall['replay_seconds'] / TARGET_S:.2f}x of {TARGET_S:.0f} s")
    if "rust" in walls and "python" in walls and walls["rust"]:
        print(f"python / rust wall-time ratio: {walls['python'] / walls['rust']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Content oracle cost inside a real replay: page chains vs the per-token algorithm.

Replays the first N requests (default 500) of the shipped Mooncake trace (`kvctl replay`'s
defaults, unbounded pool). Every `ContentOracle.lengths` / `record` call the engine makes is
timed (thread CPU time, so other processes on a shared machine do not count), then put to
the previous algorithm (tests/support/reference_oracle.py: hashes every token on every
call), timed the same way, in the same process and interleaved call by call. Prints calls,
CPU seconds of each, their ratio, the remembered pages and the bytes their sets hold.

    .venv/bin/python benchmarks/bench_oracle.py [--limit 500] [--pool-tokens 0]

Speed is reported, never enforced; exit status 1 if any answer or the final hash sets differ.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRACE = ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl"


class Timed:
    """Wraps ContentOracle's two calls; runs and times the reference beside each."""

    def __init__(self) -> None:
        self.seconds = {(side, call): 0.0 for side in ("new", "old")
                        for call in ("lengths", "record")}
        self.calls = {"lengths": 0, "record": 0}
        self.differ = 0
        self.pair = None

    def install(self) -> None:
        from engine_adapter.embedded.oracle import ContentOracle
        from tests.support.reference_oracle import ReferenceOracle

        lengths, record, timed = ContentOracle.lengths, ContentOracle.record, self

        def reference(oracle):
            if timed.pair is None:
                timed.pair = (oracle, ReferenceOracle(oracle.page_size, int(oracle._hasher.base)))
            return timed.pair[1]

        def timed_lengths(oracle, key, tokens, cap, chain=None):
            a = time.thread_time()
            got = lengths(oracle, key, tokens, cap, chain=chain)
            b = time.thread_time()
            want = reference(oracle).lengths(key, tokens, cap)
            timed._add("lengths", a, b, time.thread_time())
            timed.differ += got != want
            return got

        def timed_record(oracle, key, tokens, upto, known=0, chain=None):
            a = time.thread_time()
            record(oracle, key, tokens, upto, known=known, chain=chain)
            b = time.thread_time()
            reference(oracle).record(key, tokens, upto, known=known)
            timed._add("record", a, b, time.thread_time())

        ContentOracle.lengths, ContentOracle.record = timed_lengths, timed_record

    def _add(self, call: str, a: float, b: float, c: float) -> None:
        self.seconds["new", call] += b - a
        self.seconds["old", call] += c - b
        self.calls[call] += 1


def set_bytes(seen: dict) -> int:
    return sum(sys.getsizeof(s) + sum(sys.getsizeof(v) for v in s) for s in seen.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=500, help="requests from the trace head")
    parser.add_argument("--pool-tokens", type=int, default=0, help="0 = unbounded")
    args = parser.parse_args(argv)
    from kvctl.replay.runner import ReplaySettings, run_replay

    timed = Timed()
    timed.install()
    run_replay(ReplaySettings(workload=str(TRACE), limit=args.limit, pool_tokens=args.pool_tokens))
    oracle, reference = timed.pair
    new = timed.seconds["new", "lengths"] + timed.seconds["new", "record"]
    old = timed.seconds["old", "lengths"] + timed.seconds["old", "record"]
    print(f"Mooncake head: {args.limit} requests, pool {args.pool_tokens or 'unbounded'}, page "
          f"{oracle.page_size}; {timed.calls['lengths']:,} lengths + "
          f"{timed.calls['record']:,} record calls")
    for call in ("lengths", "record"):
        print(f"  {call:8s} page chains {timed.seconds['new', call]:6.3f} s   "
              f"per-token {timed.seconds['old', call]:6.3f} s")
    print(f"oracle CPU: page chains {new:.3f} s, per-token {old:.3f} s, ratio {new / old:.3f}")
    print(f"remembered pages {oracle.remembered_pages:,}, "
          f"their sets {set_bytes(oracle._seen) / 1e6:.1f} MB")
    same = timed.differ == 0 and oracle._seen == reference._seen
    print("answers and hash sets identical" if same else f"error: {timed.differ} answers differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""Content oracle cost inside a real replay: the current oracle against a baseline, call by call.

Replays the first N requests (default 500) of the shipped Mooncake trace (`kvctl replay`'s
defaults, unbounded pool unless --pool-tokens). Every `ContentOracle.lengths` / `record`
call the engine makes is timed, then put to a baseline with the same arguments, timed the
same way, in the same process and interleaved call by call (the order alternates each
call, so neither always runs on a warm cache). Baselines:

    sets       the previous oracle (tests/support/set_oracle.py: Python sets of page
               hashes), same hasher and page chains (default)
    per-token  the algorithm before page chains (tests/support/reference_oracle.py: hashes
               every token on every call)

Prints calls; per call kind, thread CPU seconds and wall (perf_counter) seconds of each and
their ratio (the current oracle's records only queue pages: its lengths calls include adding
them, so compare the totals); the remembered pages and the bytes each side's sets hold
(current: `ContentOracle.nbytes`; Python sets: the sets and their int objects, getsizeof).

    .venv/bin/python benchmarks/bench_oracle.py [--limit 500] [--pool-tokens 0]
        [--against sets|per-token]

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
SIDES = ("current", "baseline")
CALLS = ("lengths", "record")


class Timed:
    """Wraps ContentOracle's two calls; runs and times the baseline beside each."""

    def __init__(self, against: str) -> None:
        self.against = against
        self.cpu = {(side, call): 0.0 for side in SIDES for call in CALLS}
        self.wall = dict(self.cpu)
        self.calls = dict.fromkeys(CALLS, 0)
        self.differ = 0
        self.pair = None

    def baseline(self, oracle):
        if self.pair is None:
            if self.against == "sets":
                from tests.support.set_oracle import SetOracle

                other = SetOracle(oracle.page_size)
                other._hasher = oracle._hasher  # one hasher: chains cache their hashes once
            else:
                from tests.support.reference_oracle import ReferenceOracle

                other = ReferenceOracle(oracle.page_size, int(oracle._hasher.base))
            self.pair = (oracle, other)
        return self.pair[1]

    def shadow_key(self, key):
        """The baseline's key: a PageChain remembers per key what it recorded, so the
        baseline needs keys of its own (3-tuples: key[0] is still the namespace)."""
        return (*key, "baseline") if self.against == "sets" else key

    def install(self) -> None:
        from engine_adapter.embedded.oracle import ContentOracle

        lengths, record, timed = ContentOracle.lengths, ContentOracle.record, self

        def unwrapped(other, name: str):
            """The baseline's own method: SetOracle inherits ContentOracle's, which these
            wrappers replace on the class."""
            if isinstance(other, ContentOracle):
                return {"lengths": lengths, "record": record}[name]
            return getattr(type(other), name)

        def timed_lengths(oracle, key, tokens, cap, chain=None):
            got, want = timed.both(
                "lengths", oracle, chain,
                lambda: lengths(oracle, key, tokens, cap, chain=chain),
                lambda other, extra: unwrapped(other, "lengths")(
                    other, timed.shadow_key(key), tokens, cap, **extra))
            timed.differ += got != want
            return got

        def timed_record(oracle, key, tokens, upto, known=0, chain=None):
            timed.both(
                "record", oracle, chain,
                lambda: record(oracle, key, tokens, upto, known=known, chain=chain),
                lambda other, extra: unwrapped(other, "record")(
                    other, timed.shadow_key(key), tokens, upto, known=known, **extra))

        ContentOracle.lengths, ContentOracle.record = timed_lengths, timed_record

    def both(self, call: str, oracle, chain, current, baseline):
        """Runs current() and baseline(other, extra) timed, in an order that alternates
        call by call; a request's chain hashes are computed first, for both, untimed."""
        other = self.baseline(oracle)
        if chain is not None:
            chain.hashes(oracle._hasher)
        extra = {"chain": chain} if self.against == "sets" else {}
        runs = [("current", current), ("baseline", lambda: baseline(other, extra))]
        if self.calls[call] % 2:
            runs.reverse()
        results = {side: self.run(side, call, fn) for side, fn in runs}
        self.calls[call] += 1
        return results["current"], results["baseline"]

    def run(self, side: str, call: str, fn):
        c, w = time.thread_time(), time.perf_counter()
        result = fn()
        self.cpu[side, call] += time.thread_time() - c
        self.wall[side, call] += time.perf_counter() - w
        return result


def set_bytes(seen: dict) -> int:
    """Bytes of Python sets of ints and of the ints themselves."""
    return sum(sys.getsizeof(s) + sum(sys.getsizeof(v) for v in s) for s in seen.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=500, help="requests from the trace head")
    parser.add_argument("--pool-tokens", type=int, default=0, help="0 = unbounded")
    parser.add_argument("--against", choices=("sets", "per-token"), default="sets")
    args = parser.parse_args(argv)
    from kvctl.replay.runner import ReplaySettings, run_replay

    timed = Timed(args.against)
    timed.install()
    run_replay(ReplaySettings(workload=str(TRACE), limit=args.limit, pool_tokens=args.pool_tokens))
    oracle, other = timed.pair
    print(f"Mooncake head: {args.limit} requests, pool {args.pool_tokens or 'unbounded'}, page "
          f"{oracle.page_size}; {timed.calls['lengths']:,} lengths + "
          f"{timed.calls['record']:,} record calls; baseline: {args.against}")
    for clock, table in (("CPU", timed.cpu), ("wall", timed.wall)):
        for call in CALLS:
            cur, base = table["current", call], table["baseline", call]
            per = 1e6 / max(timed.calls[call], 1)
            print(f"  {clock:4s} {call:8s} current {cur:7.3f} s ({cur * per:6.1f} us/call)   "
                  f"baseline {base:7.3f} s ({base * per:6.1f} us/call)   ratio {cur / base:.3f}")
        cur = sum(table["current", call] for call in CALLS)
        base = sum(table["baseline", call] for call in CALLS)
        print(f"oracle {clock}: current {cur:.3f} s, baseline {base:.3f} s, ratio {cur / base:.3f}")
    pages = oracle.remembered_pages
    held = set_bytes(other._seen)
    print(f"remembered pages {pages:,}: current {oracle.nbytes / 1e6:.1f} MB "
          f"({oracle.nbytes / max(pages, 1):.1f} B/page), baseline's Python sets "
          f"{held / 1e6:.1f} MB ({held / max(pages, 1):.1f} B/page)")
    theirs = {key[:2]: seen for key, seen in other._seen.items()}
    same = timed.differ == 0 and oracle.remembered() == theirs
    print("answers and hash sets identical" if same else f"error: {timed.differ} answers differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""A dense-reuse Mooncake-format trace, deterministic for a seed: many requests sharing
multi-block prefixes, arriving in bursts so that hundreds run at once.

    request = [ group prefix | branch | tail ]              512-token blocks (hash ids)
              GROUP_BLOCKS   BRANCH   1..TAIL blocks, the last one partial
              shared by the  shared by
              group's        its branch
              requests       (BRANCHES per group)

    follow-up (FOLLOW_UP of requests, after the first burst): an earlier request's whole
    prompt plus 1-2 new blocks, as a conversation's next turn

    arrivals: bursts of BURST requests at one instant, every GAP_MS; a burst mixes groups,
    so requests admitted in one batch share prefixes they cannot yet hit

Hash ids are prefix-block ids (Mooncake's meaning): each distinct path of blocks gets its
own id, so equal ids at a position mean an equal prefix.

    python benchmarks/dense_trace.py OUT.jsonl [--requests 800] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

GROUPS, GROUP_BLOCKS = 12, (2, 6)  # shared prefixes: how many, blocks each (range)
BRANCHES, BRANCH_BLOCKS = 6, (1, 3)  # per group
TAIL = 3
FOLLOW_UP = 0.3
BURST, GAP_MS = 240, 20_000
OUTPUT = (16, 400)
BLOCK = 512


def dense_trace(requests: int, seed: int) -> list[dict]:
    """The trace's lines, in arrival order."""
    rng = random.Random(seed)
    ids: dict[tuple, int] = {}

    def path_ids(path: tuple) -> list[int]:
        return [ids.setdefault(path[:i + 1], len(ids)) for i in range(len(path))]

    groups = [tuple(("g", g, b) for b in range(rng.randint(*GROUP_BLOCKS))) for g in range(GROUPS)]
    lines: list[dict] = []
    paths: list[tuple] = []
    for n in range(requests):
        burst = n // BURST
        if burst > 0 and rng.random() < FOLLOW_UP:
            base = paths[rng.randrange(len(paths))]
            path = base + tuple(("f", n, b) for b in range(rng.randint(1, 2)))
        else:
            group = rng.randrange(GROUPS)
            branch = rng.randrange(BRANCHES)
            path = (groups[group]
                    + tuple(("b", group, branch, b) for b in range(rng.randint(*BRANCH_BLOCKS)))
                    + tuple(("t", n, b) for b in range(rng.randint(1, TAIL))))
        paths.append(path)
        length = BLOCK * (len(path) - 1) + rng.randint(1, BLOCK)
        lines.append({"timestamp": burst * GAP_MS, "input_length": length,
                      "output_length": rng.randint(*OUTPUT), "hash_ids": path_ids(path)})
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    with args.out.open("w") as handle:
        for line in dense_trace(args.requests, args.seed):
            handle.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

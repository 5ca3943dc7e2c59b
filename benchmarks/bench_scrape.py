"""Scrape latency of `kvctl exporter` with a prefix tree holding >= 1M cached tokens.

Builds the embedded engine (SGLang's UnifiedRadixCache, Rust core, NoOp KV pool of 1.2M
token slots), fills the tree with 256 distinct 4,096-token prompts (1,048,576 cached tokens),
serves it with `telemetry.exporter.serve` on loopback and times full HTTP scrapes of
/metrics: sequential, then 16 at a time. Prints p50/p99 and the ratio to the 50 ms target.

    .venv/bin/python benchmarks/bench_scrape.py [--scrapes 400]

Exit status 1 when the tree holds fewer than 1M tokens (the benchmark would be meaningless);
the latency target is reported, not enforced.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_P99_S = 0.050
MIN_CACHED_TOKENS = 1_000_000


def build_engine(prompts: int, prompt_tokens: int):
    import numpy as np

    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    engine = EmbeddedEngine(EngineConfig(pool_tokens=1_200_000, page_size=16,
                                         max_context_len=8_192, token_budget=65_536,
                                         kv_pool="noop", tree_core="rust"))
    rng = np.random.default_rng(0)
    for index in range(prompts):
        engine.submit(RequestSpec(rid=f"bench-{index}", max_new_tokens=1,
                                  tokens=rng.integers(1, 1 << 29, size=prompt_tokens)))
    engine.run_until_idle()
    return engine


def _scrape_seconds(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()
    return time.perf_counter() - started


def _percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def _report(label: str, samples: list[float]) -> float:
    p50, p99 = _percentile(samples, 50), _percentile(samples, 99)
    print(f"{label:<22} n={len(samples):<4} p50={p50 * 1e3:7.2f} ms  p99={p99 * 1e3:7.2f} ms  "
          f"p99/target={p99 / TARGET_P99_S:5.3f}")
    return p99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--prompt-tokens", type=int, default=4_096)
    args = parser.parse_args()

    from telemetry.exporter import serve

    started = time.perf_counter()
    engine = build_engine(args.prompts, args.prompt_tokens)
    snapshot = engine.snapshot()
    print(f"engine: {snapshot.info.tree_core} tree, {snapshot.tree.cached_tokens:,} cached "
          f"tokens, pool {snapshot.ledger.pool_tokens:,} slots "
          f"(built in {time.perf_counter() - started:.1f} s)")
    if snapshot.tree.cached_tokens < MIN_CACHED_TOKENS:
        print(f"error: tree holds {snapshot.tree.cached_tokens:,} < {MIN_CACHED_TOKENS:,} tokens")
        return 1
    with serve(engine, port=0) as server:
        for _ in range(20):  # warm up sockets, imports, first exposition
            _scrape_seconds(server.url)
        sequential = [_scrape_seconds(server.url) for _ in range(args.scrapes)]
        with ThreadPoolExecutor(max_workers=16) as pool:
            concurrent = list(pool.map(lambda _: _scrape_seconds(server.url),
                                       range(args.scrapes)))
        reads = [_timed_read(engine) for _ in range(args.scrapes)]
    _report("snapshot() alone", reads)
    p99 = _report("scrape, sequential", sequential)
    _report("scrape, 16 concurrent", concurrent)
    print(f"target p99 < {TARGET_P99_S * 1e3:.0f} ms (sequential): "
          f"{'met' if p99 < TARGET_P99_S else 'MISSED'}")
    engine.close()
    return 0


def _timed_read(engine) -> float:
    started = time.perf_counter()
    engine.snapshot()
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())

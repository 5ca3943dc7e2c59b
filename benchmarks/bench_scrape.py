"""Scrape latency of `kvctl exporter` with a prefix tree holding >= 1M cached tokens.

Builds the embedded engine (SGLang's UnifiedRadixCache, Rust core, NoOp KV pool of 1.2M
token slots), fills the tree with 256 distinct 4,096-token prompts (1,048,576 cached tokens),
serves it on loopback as `kvctl exporter` does (the snapshot republished every 0.25 s, a
live run's cadence) and times full HTTP scrapes of /metrics, sequential and 16 at a time,
alternating between kvctl's exporter (kvctl families rendered once per snapshot) and the
stock prometheus_client WSGI app over the same collector (rendered every scrape, the
exporter before the cache). The scrapers run in a separate process, as Prometheus does. Prints p50/p99, the stock/cached ratios and the 50 ms target.

    .venv/bin/python benchmarks/bench_scrape.py [--scrapes 400]

Exit status 1 when the tree holds fewer than 1M tokens (the benchmark would be meaningless);
the latency target is reported, not enforced.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
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


class _Published:
    """What `kvctl exporter` serves: a live run's latest snapshot, republished every
    `interval_s` (LiveRun's default cadence is 0.25 s); reads return the published object."""

    read_only = True

    def __init__(self, engine, interval_s: float = 0.25) -> None:
        self._engine = engine
        self._current = engine.snapshot()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh, args=(interval_s,), daemon=True)
        self._thread.start()

    def _refresh(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._current = self._engine.snapshot()

    def snapshot(self):
        return self._current

    def take_receipts(self):
        return []

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _stock_server(source):
    """The pre-cache exporter: prometheus_client's WSGI app renders every scrape."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    from telemetry.collector import SnapshotCollector

    class _Quiet(WSGIRequestHandler):
        def log_message(self, *args) -> None:
            pass

    class _Server(ThreadingWSGIServer):
        request_queue_size = 512

    registry = CollectorRegistry()
    SnapshotCollector(source, registry=registry)
    ProcessCollector(registry=registry)
    httpd = make_server("127.0.0.1", 0, make_wsgi_app(registry), _Server, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/metrics"


def _phase(url: str, scrapes: int, workers: int) -> list[float]:
    """Latencies of `scrapes` scrapes by `workers` threads."""
    if workers == 1:
        return [_scrape_seconds(url) for _ in range(scrapes)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda _: _scrape_seconds(url), range(scrapes)))


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
          f"(built in {time.perf_counter() - started:.1f} s); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if snapshot.tree.cached_tokens < MIN_CACHED_TOKENS:
        print(f"error: tree holds {snapshot.tree.cached_tokens:,} < {MIN_CACHED_TOKENS:,} tokens")
        return 1
    reads = [_timed_read(engine) for _ in range(args.scrapes)]
    _report("snapshot() alone", reads)
    source = _Published(engine)
    stock, stock_url = _stock_server(source)
    results: dict[tuple[str, int], list[float]] = {}
    # The scrapers run in another process, as Prometheus does: client threads in the
    # exporter's own process would compete with it for the GIL and inflate its latency.
    with serve(source, port=0) as server, ProcessPoolExecutor(max_workers=1) as client:
        for url in (server.url, stock_url):  # warm up sockets, imports, first exposition
            client.submit(_phase, url, 20, 1).result()
        renders_before = server.renderer.renders
        for workers in (1, 16):  # alternate cached and stock, in halves, in one run
            for half in range(2):
                for name, url in (("cached", server.url), ("stock", stock_url)):
                    results.setdefault((name, workers), []).extend(
                        client.submit(_phase, url, args.scrapes // 2, workers).result())
        renders = server.renderer.renders - renders_before
    stock.shutdown()
    stock.server_close()
    source.close()
    p99 = {}
    for (name, workers), samples in results.items():
        label = f"scrape, {name}, {'sequential' if workers == 1 else '16 concurrent'}"
        p99[name, workers] = _report(label, samples)
    total = sum(len(s) for (name, _), s in results.items() if name == "cached")
    print(f"cached exporter rendered the kvctl families {renders} times for {total} scrapes "
          f"(snapshot republished every 0.25 s)")
    for workers in (1, 16):
        print(f"p99 stock / cached, {'sequential' if workers == 1 else '16 concurrent'}: "
              f"{p99['stock', workers] / p99['cached', workers]:.2f}x")
    print(f"target p99 < {TARGET_P99_S * 1e3:.0f} ms (sequential, cached): "
          f"{'met' if p99['cached', 1] < TARGET_P99_S else 'MISSED'}; 16 concurrent: "
          f"{'met' if p99['cached', 16] < TARGET_P99_S else 'MISSED'}")
    engine.close()
    return 0


def _timed_read(engine) -> float:
    started = time.perf_counter()
    engine.snapshot()
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())

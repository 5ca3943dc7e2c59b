"""Concurrent load: SGLang's summed cached_tokens on the real CPU server vs `kvctl replay`'s.

The first N requests of the shipped Mooncake trace, scaled to fit the tiny CPU server
(tests/e2e/sglang_server.py): each 512-token block becomes `--block-tokens` token ids
(drawn per hash id, in [1, 500) below the tiny vocabulary), so shared blocks stay shared;
outputs are `output_length // --out-div` (at least 1, `ignore_eos`). Arrivals are the
trace's, divided by `--speedup`. The server runs with page 16, pool 65,536 tokens,
--max-running-requests 8, --chunked-prefill-size 2048 (issue 29's setting), lru, fcfs.

    measured    one client thread per request, each sleeping until its arrival, then
                POST /generate; the sum of SGLang's meta_info.cached_tokens
    predicted   EmbeddedEngine with the server's settings from /server_info, the same ids
                and arrival times (the roofline clock of an H100, not the server's)

    .venv/bin/python benchmarks/bench_sched_gap.py [--requests 300] [--speedup 20]
    .venv/bin/python benchmarks/bench_sched_gap.py --replay-only measured.json
        (the replay half alone, e.g. with PYTHONPATH at an older checkout; its
        EngineConfig fields are passed only where that checkout has them)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl"
SERVER_ARGS = ("--page-size", "16", "--max-total-tokens", "65536", "--max-running-requests", "8",
               "--chunked-prefill-size", "2048", "--context-length", "16384",
               "--radix-eviction-policy", "lru", "--schedule-policy", "fcfs")


def workload(args) -> list[dict]:
    from kvctl.replay.mooncake import iter_records

    out = []
    for record in iter_records(TRACE, limit=args.requests):
        ids: list[int] = []
        for hash_id in record.hash_ids:
            rng = np.random.default_rng(hash_id)
            ids.extend(rng.integers(1, 500, args.block_tokens).tolist())
        length = max(1, -(-record.input_length * args.block_tokens // 512))
        out.append({"rid": record.rid, "ids": ids[:length], "arrival_s": record.arrival_s / args.speedup,
                    "max_new": max(1, record.output_length // args.out_div)})
    return out


def measure(requests: list[dict]) -> tuple[dict, list[int]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from e2e.sglang_server import SGLangServer

    server = SGLangServer(Path(tempfile.mkdtemp(prefix="sched-gap-")), extra_args=SERVER_ARGS,
                          extra_env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    cached = [0] * len(requests)
    try:
        server.start()
        info = server.server_info()
        began = time.monotonic()

        def send(index: int, request: dict) -> None:
            time.sleep(max(0.0, began + request["arrival_s"] - time.monotonic()))
            reply = server.generate(request["ids"], max_new_tokens=request["max_new"],
                                    ignore_eos=True, timeout_s=1800)
            cached[index] = int(reply["meta_info"]["cached_tokens"])

        threads = [threading.Thread(target=send, args=(i, r)) for i, r in enumerate(requests)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(f"server drive: {time.monotonic() - began:.1f} s", file=sys.stderr)
    finally:
        server.stop()
    return info, cached


def predict(info: dict, requests: list[dict]) -> list[int]:
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.embedded.requests import RequestSpec

    wanted = dict(pool_tokens=int(info["max_total_num_tokens"]), page_size=int(info["page_size"]),
                  eviction_policy=info["radix_eviction_policy"],
                  schedule_policy=info["schedule_policy"],
                  max_running_requests=int(info["max_running_requests"]),
                  token_budget=int(info["chunked_prefill_size"]),
                  max_prefill_tokens=int(info["max_prefill_tokens"]),
                  max_context_len=int(info["context_length"]), namespace_salt="gap")
    names = {f.name for f in dataclasses.fields(EngineConfig)}
    engine = EmbeddedEngine(EngineConfig(**{k: v for k, v in wanted.items() if k in names}))
    for r in requests:
        engine.submit(RequestSpec(rid=r["rid"], tokens=np.asarray(r["ids"], dtype=np.int64),
                                  max_new_tokens=r["max_new"], arrival_s=r["arrival_s"]))
    hits = {rec.rid: rec.hit_tokens for rec in engine.run_until_idle()}
    return [hits.get(r["rid"], 0) for r in requests]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--speedup", type=float, default=20.0)
    parser.add_argument("--block-tokens", type=int, default=64)
    parser.add_argument("--out-div", type=int, default=8)
    parser.add_argument("--save", type=Path, default=None, help="write measured figures here")
    parser.add_argument("--replay-only", type=Path, default=None)
    args = parser.parse_args()
    requests = workload(args)
    prompt = sum(len(r["ids"]) for r in requests)
    if args.replay_only:
        saved = json.loads(args.replay_only.read_text())
        info, cached = saved["info"], saved["cached"]
    else:
        info, cached = measure(requests)
        if args.save:
            args.save.write_text(json.dumps({"info": info, "cached": cached}))
    predicted = predict(info, requests)
    equal = sum(a == b for a, b in zip(cached, predicted))
    print(f"{len(requests)} requests, {prompt:,} prompt tokens, speedup {args.speedup:g}")
    print(f"  measured  (server) hit tokens {sum(cached):>9,}  rate {sum(cached) / prompt:.2%}")
    print(f"  predicted (replay) hit tokens {sum(predicted):>9,}  rate {sum(predicted) / prompt:.2%}")
    print(f"  per-request equal: {equal}/{len(requests)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

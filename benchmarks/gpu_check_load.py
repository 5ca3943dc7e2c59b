"""Load and ledger probes for benchmarks/gpu_check.sh (run against a live SGLang server).

    python benchmarks/gpu_check_load.py load   --url URL [--requests 64] [--concurrency 16]
    python benchmarks/gpu_check_load.py ledger --url URL --plugin-url URL [--requests 32]
    python benchmarks/gpu_check_load.py hits   --url URL --plugin-url URL [--requests 32]

Requests share prefixes the way agent sessions do: `--groups` prefixes of `--prefix` tokens,
each followed by a distinct `--suffix`-token tail, sent through `/generate` with
`input_ids` (the server runs with --skip-tokenizer-init). Token ids stay below `--vocab`.

`load` prints one JSON line: requests, output tokens, wall seconds, output tokens/s and
SGLang's cached-token total (meta_info.cached_tokens). `ledger` sends the same kind of load
and, while requests are in flight, reads the plugin's ledger repeatedly, through
`kvctl inspect --url URL --plugin-url URL --json` when this kvctl has that flag, else from
the plugin's own `GET /snapshot`; it prints one JSON line per read and exits 1 unless every
read taken with requests running has residual 0 and delta_ref max 0 (seed 000 0x0CF), and
at least one such read happened. `hits` sends the load once and compares the plugin's
hit-token counter (its /snapshot `counters.hit_tokens`, read before and after, once its finished
count has caught up) with the cached tokens SGLang's replies report; it prints one JSON line and
exits 1 unless they are equal. Exit 2 on bad arguments. Prompt tokens never leave this
process except to the server.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prompts(requests: int, groups: int, prefix: int, suffix: int,
            vocab: int = 1000) -> list[list[int]]:
    """Request i: the prefix of group i % groups (ids in [1, vocab/2)), then its own tail
    (ids in [vocab/2, vocab))."""
    half = vocab // 2
    out = []
    for i in range(requests):
        g = i % groups
        shared = [1 + (g * 97 + j) % (half - 1) for j in range(prefix)]
        tail = [half + (i * 31 + j) % (vocab - half) for j in range(suffix)]
        out.append(shared + tail)
    return out


def generate(url: str, ids: list[int], new_tokens: int) -> dict:
    body = json.dumps({"input_ids": ids, "sampling_params": {
        "max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}}).encode()
    request = urllib.request.Request(f"{url}/generate", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        return json.loads(reply.read())


def run_load(args, replies_out: list | None = None) -> dict:
    batch = prompts(args.requests, args.groups, args.prefix, args.suffix, args.vocab)
    started = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        replies = list(pool.map(lambda ids: generate(args.url, ids, args.new_tokens), batch))
    seconds = time.perf_counter() - started
    if replies_out is not None:
        replies_out.extend(replies)
    output = sum(r["meta_info"]["completion_tokens"] for r in replies)
    return {"requests": len(replies), "output_tokens": output, "seconds": round(seconds, 3),
            "output_tokens_per_s": round(output / seconds, 1),
            "cached_tokens": sum(r["meta_info"]["cached_tokens"] for r in replies)}


def _kvctl_has_plugin_url() -> bool:
    done = subprocess.run([sys.executable, "-m", "kvctl", "inspect", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    return "--plugin-url" in done.stdout


def read_ledger(url: str, plugin_url: str, via_kvctl: bool) -> dict:
    """One read: residual, delta_ref max and used tokens, from kvctl or the plugin."""
    if via_kvctl:
        done = subprocess.run(
            [sys.executable, "-m", "kvctl", "inspect", "--url", url, "--plugin-url", plugin_url,
             "--json", "--wait", "0.5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return {"source": "kvctl", "error": done.stderr.strip()[-300:]}
        doc = json.loads(done.stdout)
        snapshot, residual = doc["snapshot"], doc["derived"]["residual_tokens"]
    else:
        with urllib.request.urlopen(f"{plugin_url}/snapshot", timeout=30) as reply:
            snapshot = json.loads(reply.read())["snapshot"]
        ledger = snapshot["ledger"]
        parts = ("free_tokens", "evictable_tokens", "protected_tokens", "private_tokens")
        residual = (None if any(ledger[k] is None for k in parts)
                    else ledger["pool_tokens"] - sum(ledger[k] for k in parts))
    refs = snapshot.get("refs")
    delta = None if refs is None else max((abs(n["recorded"] - n["derived"])
                                            for n in refs["off_nodes"]), default=0)
    return {"source": "kvctl" if via_kvctl else "plugin /snapshot", "residual_tokens": residual,
            "delta_ref_max": delta, "used_tokens": snapshot["ledger"]["used_tokens"],
            "protected_tokens": snapshot["ledger"]["protected_tokens"]}


def run_ledger(args) -> int:
    via_kvctl = _kvctl_has_plugin_url()
    finished = threading.Event()

    def load() -> None:
        try:
            run_load(args)
        finally:
            finished.set()

    sender = threading.Thread(target=load, daemon=True)
    sender.start()
    reads, busy_ok, bad = 0, 0, 0
    while not finished.is_set() or reads == 0:
        sample = read_ledger(args.url, args.plugin_url, via_kvctl)
        reads += 1
        print(json.dumps(sample), flush=True)
        busy = (sample.get("used_tokens") or 0) > 0
        clean = sample.get("residual_tokens") == 0 and sample.get("delta_ref_max") == 0
        if busy and clean:
            busy_ok += 1
        elif busy or "error" in sample:
            bad += 1
        time.sleep(args.every)
    sender.join()
    print(json.dumps({"reads": reads, "busy_clean_reads": busy_ok, "bad_reads": bad}))
    return 0 if busy_ok > 0 and bad == 0 else 1


def plugin_snapshot(plugin_url: str) -> dict:
    with urllib.request.urlopen(f"{plugin_url}/snapshot", timeout=30) as reply:
        return json.loads(reply.read())["snapshot"]


def plugin_counters(plugin_url: str) -> dict:
    return plugin_snapshot(plugin_url)["counters"]


def fresh_counters(plugin_url: str, wait_s: float = 15.0) -> tuple[dict, bool]:
    """Counters from a sample the plugin took after this call began. The plugin samples on
    its cadence (KVCTL_PLUGIN_LEDGER_S, idle loops too), so a read right after the server's
    last request can predate that request's finish, and the load would then count it as
    its own (seen: 17 finished for 16 requests after the launcher's warm-up request).
    Returns (counters, fresh); fresh False when no newer sample came within `wait_s`."""
    since = time.time()
    while True:
        snap = plugin_snapshot(plugin_url)
        if snap["wall_time_s"] > since:
            return snap["counters"], True
        if time.time() - since > wait_s:
            return snap["counters"], False
        time.sleep(0.1)


def run_hits(args, settle_s: float = 30.0) -> int:
    """Plugin hit tokens over one load == the sum of SGLang's `meta_info.cached_tokens`."""
    before, fresh = fresh_counters(args.plugin_url)
    replies: list[dict] = []
    report = run_load(args, replies)
    deadline = time.monotonic() + settle_s
    after = plugin_counters(args.plugin_url)
    while (after["requests_finished"] - before["requests_finished"] < len(replies)
           and time.monotonic() < deadline):
        time.sleep(0.5)
        after = plugin_counters(args.plugin_url)
    sglang = sum(r["meta_info"]["cached_tokens"] for r in replies)
    plugin = after["hit_tokens"] - before["hit_tokens"]
    finished = after["requests_finished"] - before["requests_finished"]
    print(json.dumps({"requests": report["requests"], "sglang_cached_tokens": sglang,
                      "plugin_hit_tokens": plugin, "plugin_finished": finished,
                      "fresh_baseline": fresh,
                      "equal": sglang == plugin and finished == len(replies)}))
    return 0 if sglang == plugin and finished == len(replies) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("load", "ledger", "hits"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--plugin-url")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--prefix", type=int, default=256)
    parser.add_argument("--suffix", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1000, help="the model's vocabulary size")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between ledger reads")
    args = parser.parse_args(argv)
    if args.mode in ("ledger", "hits") and not args.plugin_url:
        parser.error(f"{args.mode} needs --plugin-url")
    if min(args.requests, args.concurrency, args.groups, args.prefix, args.new_tokens,
           args.vocab - 4) <= 0:
        parser.error("counts must be positive")
    if args.mode == "load":
        print(json.dumps(run_load(args)))
        return 0
    return run_ledger(args) if args.mode == "ledger" else run_hits(args)


if __name__ == "__main__":
    sys.exit(main())

"""The fleet twin against SGLang's own router on this CPU, and the fleet replay's speed
(issue 33 targets).

`proof` (default): a real fleet, `kvctl sandbox --replicas 2` (two CPU SGLang servers, each
with kvctl's plugin and the one-character-per-id tokenizer, page 16, a 16,384-token pool so
the trace evicts, 8 running, 8,192-token context), and SGLang's router (sglang-router 0.3.2)
in front, once per policy (round_robin, power_of_two, cache_aware; the workers stay up, a
router is started per policy). The workload is the bench_twin scaled trace: the first N
(300) Mooncake requests, lengths / 8, arrivals sped up 20x.

    1. a calibration drive (cache_aware) fits the step-cost model on its own steps and
       saves it (--save-cost-model)
    2. per policy, `--runs` drives (2) of `kvctl replay --against ROUTER --router P
       --cost-model SAVED`: every prediction is timed by the clock of drive 1, a different
       drive (out of sample)
    3. printed per policy: measured mean of the drives and predicted fleet hit rate,
       requests per replica, per-request equal hit tokens, TTFT p50/p99 ratios; and the
       ranking of the policies by hit rate and by TTFT p99, measured and predicted

Targets: hit rate within 0.5 points of the measured mean; requests per replica exact for
round_robin, within 5% for cache_aware; equal hit tokens for >= 95% of requests; TTFT
p50/p99 within 20% (out-of-sample clock); the same ranking.

`speed`: the full shipped hour, `kvctl replay` of one server against `--replicas 4
--router cache_aware`, whole processes timed back to back in this run; target <= 1.5x.

    .venv/bin/python benchmarks/bench_fleet.py proof [--limit 300] [--runs 2] [--ready FILE]
    .venv/bin/python benchmarks/bench_fleet.py speed [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_twin import scaled_trace  # noqa: E402

KVCTL = [sys.executable, "-m", "kvctl"]
FULL = ROOT / "examples" / "traces" / "mooncake" / "conversation_trace.jsonl"
POLICIES = ("round_robin", "power_of_two", "cache_aware")
SANDBOX = ("--replicas", "2", "--router", "cache_aware", "--port", "0", "--json",
           "--page-size", "16", "--pool-tokens", "16384", "--context-length", "8192",
           "--max-running", "8")


def start_fleet(folder: Path) -> tuple[subprocess.Popen, dict]:
    out = (folder / "ready.json").open("w")
    proc = subprocess.Popen([*KVCTL, "sandbox", *SANDBOX], stdout=out,
                            stderr=(folder / "sandbox.err").open("w"), start_new_session=True)
    deadline = time.monotonic() + 1500
    while time.monotonic() < deadline:
        text = (folder / "ready.json").read_text()
        if text.strip():
            return proc, json.loads(text.splitlines()[0])
        if proc.poll() is not None:
            raise SystemExit(f"the sandbox fleet exited: {(folder / 'sandbox.err').read_text()[-400:]}")
        time.sleep(2)
    raise SystemExit("the sandbox fleet did not become ready in 1500 s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(policy: str, workers: list[str], folder: Path) -> tuple[subprocess.Popen, str]:
    port, metrics = free_port(), free_port()
    cmd = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *workers,
           "--policy", policy, "--host", "127.0.0.1", "--port", str(port),
           "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
           "--shutdown-grace-period-secs", "5", "--worker-startup-check-interval", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=(folder / f"router-{policy}.log").open("w"),
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/workers", timeout=2) as reply:
                listed = json.loads(reply.read()).get("workers", [])
            if len(listed) == len(workers):
                return proc, url
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"router {policy} exited")
        time.sleep(1)
    raise SystemExit(f"router {policy} not ready in 300 s")


def against(trace: Path, url: str, policy: str, *extra: str) -> dict:
    done = subprocess.run([*KVCTL, "replay", str(trace), "--against", url, "--router", policy,
                           "--speedup", "20", "--json", *extra], capture_output=True, text=True,
                          timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"kvctl replay --against failed: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def proof(args) -> int:
    folder = Path(tempfile.mkdtemp(prefix="kvctl-bench-fleet-"))
    trace = scaled_trace(folder, args.limit)
    sandbox, ready = (None, json.loads(Path(args.ready).read_text().splitlines()[0])) \
        if args.ready else start_fleet(folder)
    routers = []
    results: dict[str, list[dict]] = {}
    try:
        workers = [w["url"] for w in ready["workers"]]
        urls = {"cache_aware": ready["url"]}
        for policy in POLICIES:
            if policy not in urls:
                proc, urls[policy] = start_router(policy, workers, folder)
                routers.append(proc)
        model = folder / "clock.json"
        if args.clock:  # a clock saved by an earlier calibration drive of this bench
            model = Path(args.clock)
        else:
            calibration = against(trace, urls["cache_aware"], "cache_aware",
                                  "--save-cost-model", str(model))
            print(f"calibration drive: clock {calibration['clock']['label']}, "
                  f"{calibration['clock'].get('samples', 0)} steps", flush=True)
        runs = {p: args.runs for p in POLICIES}
        if args.other_runs is not None:
            runs.update({p: args.other_runs for p in POLICIES if p != "cache_aware"})
        for policy in POLICIES:
            results[policy] = [against(trace, urls[policy], policy, "--cost-model", str(model))
                               for _ in range(runs[policy])]
            print(f"{policy}: {runs[policy]} drives done", flush=True)
        if args.save:
            Path(args.save).write_text(json.dumps(results, indent=1))
    finally:
        for proc in routers:
            os.killpg(proc.pid, signal.SIGTERM)
        if sandbox is not None:
            os.killpg(sandbox.pid, signal.SIGTERM)
            sandbox.wait(timeout=120)
    print(report(results, args.limit))
    return 0


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def report(results: dict, limit: int) -> str:
    lines = [f"fleet twin: {limit} scaled trace requests, arrivals / 20, 2 workers behind "
             "sglang-router 0.3.2; clock fitted on a separate calibration drive", ""]
    lines.append(f"{'policy':14} {'hit m':>7} {'hit p':>7} {'pts':>6} {'req/replica m':>16} "
                 f"{'p':>10} {'equal':>6} {'same':>6} {'TTFT50':>7} {'TTFT99':>7}")
    rank = {}
    for policy, runs in results.items():
        hit_m = _mean([r["fleet"]["measured"]["hit_rate"] for r in runs])
        hit_p = runs[0]["fleet"]["predicted"]["hit_rate"]
        per_m = [[rep["measured"]["requests"] for rep in r["replicas"]] for r in runs]
        per_p = [rep["predicted"]["requests"] for rep in runs[0]["replicas"]]
        equal = _mean([r["agreement"]["hit_tokens_equal_share"] for r in runs])
        same = _mean([r["agreement"]["same_replica_share"] for r in runs])
        t50_m = _mean([r["fleet"]["measured"]["ttft_p50_s"] for r in runs])
        t99_m = _mean([r["fleet"]["measured"]["ttft_p99_s"] for r in runs])
        t50_p = _mean([r["fleet"]["predicted"]["ttft_p50_s"] for r in runs])
        t99_p = _mean([r["fleet"]["predicted"]["ttft_p99_s"] for r in runs])
        rank[policy] = (hit_m, hit_p, t99_m, t99_p)
        lines.append(
            f"{policy:14} {hit_m:7.2%} {hit_p:7.2%} {(hit_p - hit_m) * 100:+6.2f} "
            f"{str(per_m):>16} {str(per_p):>10} {equal:6.1%} {same:6.1%} "
            f"x{t50_p / t50_m:5.2f} x{t99_p / t99_m:5.2f}")
    by = lambda i, rev: [p for p, _ in sorted(rank.items(), key=lambda kv: kv[1][i], reverse=rev)]
    lines += ["", f"ranking by hit rate    measured {by(0, True)}  predicted {by(1, True)}",
              f"ranking by TTFT p99    measured {by(2, False)}  predicted {by(3, False)}"]
    return "\n".join(lines)


def speed(args) -> int:
    base = [*KVCTL, "replay", str(FULL), "--json"]
    if args.limit:
        base += ["--limit", str(args.limit)]
    timings = {}
    for name, extra in (("one server", []),
                        ("4 replicas, cache_aware", ["--replicas", "4", "--router", "cache_aware"])):
        began = time.monotonic()
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=7200)
        timings[name] = time.monotonic() - began
        if done.returncode != 0:
            raise SystemExit(f"{name} failed: {done.stderr.strip()[-300:]}")
        print(f"{name}: {timings[name]:.1f} s (whole process)", flush=True)
    ratio = timings["4 replicas, cache_aware"] / timings["one server"]
    print(f"fleet / single = {ratio:.2f} (target <= 1.5)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what")
    p = sub.add_parser("proof")
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--ready", help="a running `kvctl sandbox --replicas 2 --json` ready line")
    p.add_argument("--save")
    p.add_argument("--clock", help="a step-cost model saved by an earlier calibration drive")
    p.add_argument("--other-runs", type=int, help="drives for round_robin and power_of_two "
                   "(default --runs)")
    s = sub.add_parser("speed")
    s.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    if args.what == "speed":
        return speed(args)
    if args.what is None:
        args = p.parse_args([])
    return proof(args)


if __name__ == "__main__":
    raise SystemExit(main())

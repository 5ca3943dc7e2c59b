"""The replay as a twin of a real server: `kvctl replay --against` on the CPU server at two
load levels, measured against predicted (issue 29).

The workload is the first N requests (default 300) of the shipped Mooncake trace
(examples/traces/mooncake/head_500.jsonl) scaled to the tiny CPU server: every length
divided by 8 (rounded up), so each 512-token hash block becomes a 64-token block (the
scaled trace's sidecar says `block_tokens: 64`; the sharing structure is the trace's own),
arrival times kept. The server is SGLang 0.5.23's own (`tests/e2e/sglang_server.py`, tiny
dummy-weight Llama, --skip-tokenizer-init) with page 16, a 65,536-token pool, 8 running
requests at most, chunked prefill 2,048 and an 8,192-token context, so the scaled trace's
longest requests are refused by the server (and by the twin's rule alike).

For each speedup (default 5 and 20: arrivals compressed 5x and 20x) it runs
`python -m kvctl replay SCALED --against URL --speedup X --json` `--runs` times (default 2)
and prints, per load level, the measured figures of each run, their mean, and the twin's
prediction: token hit rate, the share of requests whose hit tokens equal SGLang's own
`cached_tokens`, TTFT p50/p99, and requests rejected. Targets (issue 29): hit rate within
0.5 points of the mean of two measured runs; per-request hit tokens equal for >= 90%;
TTFT p50/p99 within 20%. The server runs kvctl's plugin, so each run's prediction is timed
by a step-cost model fitted to the steps the plugin completed before the drive's held-out
mark (the first half of the requests sent: kvctl/twin/holdout.py; its fit quality is
printed), and TTFT is judged on the held-out second half only (out of sample); run 1 of
each load saves a clock fitted on all its steps (--save-cost-model) and later runs are
predicted on it (--cost-model: every request judged, out of sample). In a queue-bound drive
(every request sent within seconds) the held-out first part has almost no steps and run 1
falls back to the roofline, saying so. The rows print the whole drive's figures; the TTFT
lines each run's judged ratios and, over the runs with a fitted or given clock, the ratio of
their means.

`--parts counterfactual` (twin_counterfactual.py) asks the operator's question instead:
calibrate on a sandbox at one pool and eviction policy (`--pool`, `--eviction`: 65,536,
lru), save the clock, predict a fresh sandbox at another (`--other-pool`,
`--other-eviction`: 131,072, lfu) with it, and measure that one.

    .venv/bin/python benchmarks/bench_twin.py [--limit 300] [--speedups 5,20] [--runs 2]
                                              [--save runs.json] [--parts loads,counterfactual]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from e2e.sglang_server import SGLangServer, free_port  # noqa: E402

TRACE = ROOT / "examples" / "traces" / "mooncake" / "head_500.jsonl"
SCALE = 8
SERVER_ARGS = ("--page-size", "16", "--max-total-tokens", "65536", "--context-length", "8192",
               "--chunked-prefill-size", "2048", "--max-running-requests", "8",
               # the pool is fixed by --max-total-tokens; a larger fraction only keeps
               # SGLang's memory check from failing while other processes load the host
               "--mem-fraction-static", "0.5")


def scaled_trace(folder: Path, limit: int) -> Path:
    """The first `limit` lines, lengths / SCALE rounded up (blocks of 512 / SCALE)."""
    out = folder / f"head_{limit}_div{SCALE}.jsonl"
    rows = []
    with TRACE.open() as handle:
        for line, text in enumerate(handle):
            if line >= limit:
                break
            row = json.loads(text)
            row["input_length"] = math.ceil(row["input_length"] / SCALE)
            row["output_length"] = math.ceil(row["output_length"] / SCALE)
            rows.append(row)
    out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    sidecar = {"block_tokens": 512 // SCALE, "page_size": 16,
               "note": f"head_500.jsonl, first {limit} lines, lengths / {SCALE} (bench_twin.py)"}
    out.with_name(out.name.removesuffix(".jsonl") + ".meta.json").write_text(json.dumps(sidecar))
    return out


def against(trace: Path, url: str, speedup: float, *extra: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "kvctl", "replay", str(trace), "--against", url,
                           "--speedup", str(speedup), "--json", *extra], cwd=ROOT, text=True,
                          capture_output=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"kvctl replay --against failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--speedups", default="5,20")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--save", help="write every run's --against document here (JSON)")
    parser.add_argument("--parts", default="loads,counterfactual",
                        help="loads (the load levels), counterfactual (calibrate on one "
                             "sandbox, predict another), or both")
    parser.add_argument("--pool", type=int, default=65536)
    parser.add_argument("--eviction", default="lru")
    parser.add_argument("--other-pool", type=int, default=131072)
    parser.add_argument("--other-eviction", default="lfu")
    parser.add_argument("--cf-speedup", type=float, default=20.0)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts <= {"loads", "counterfactual"}:
        raise SystemExit(f"--parts: loads and/or counterfactual, got {args.parts}")
    out = {}
    if "counterfactual" in parts:
        from twin_counterfactual import counterfactual
        from twin_counterfactual import report as cf_report

        with tempfile.TemporaryDirectory(prefix="bench-twin-cf-") as folder:
            trace = scaled_trace(Path(folder), args.limit)
            shape = {"pool": args.pool, "eviction": args.eviction,
                     "other_pool": args.other_pool, "other_eviction": args.other_eviction,
                     "speedup": args.cf_speedup}
            out["counterfactual"] = counterfactual(trace, Path(folder), **shape)
        print(cf_report(out["counterfactual"], **shape), flush=True)
    if "loads" in parts:
        out["loads"] = loads(args)
    if args.save:
        Path(args.save).write_text(json.dumps(out))
    return 0


def loads(args) -> dict:
    """The load levels (module docstring): every run's document by speedup."""
    speedups = [float(s) for s in args.speedups.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-twin-") as folder:
        trace = scaled_trace(Path(folder), args.limit)
        server = SGLangServer(Path(folder) / "server", extra_args=SERVER_ARGS,
                              extra_env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
                                         "KVCTL_SGLANG_PLUGIN": "1",
                                         "KVCTL_PLUGIN_PORT": str(free_port())})
        print(f"server up in {server.start():.1f} s ({' '.join(SERVER_ARGS)})", flush=True)
        try:
            results = {}
            for speedup in speedups:
                runs = []
                clock = Path(folder) / f"clock-{speedup:g}x.json"
                for run in range(args.runs):
                    began = time.monotonic()
                    # run 1 saves its clock, later runs are predicted on it (out of sample)
                    extra = (("--save-cost-model", str(clock)) if run == 0 else
                             ("--cost-model", str(clock)) if clock.exists() else ())
                    runs.append(against(trace, server.url, speedup, *extra))
                    one, five, _ = os.getloadavg()  # the host is shared: say how busy
                    print(f"  {speedup:g}x run {run + 1}: {time.monotonic() - began:.0f} s "
                          f"(host load average {one:.1f} / {five:.1f}, 1 / 5 min)", flush=True)
                results[speedup] = runs
        finally:
            server.stop()
    print(report(results, args.limit))
    return {str(k): v for k, v in results.items()}


def report(results: dict, limit: int) -> str:
    lines = [f"bench_twin: first {limit} requests of head_500.jsonl, lengths / {SCALE}; "
             "CPU server page 16, pool 65,536, max running 8, chunked prefill 2,048",
             f"{'load':>6} {'':11} {'hit rate':>9} {'equal hits':>11} {'TTFT p50':>10} "
             f"{'TTFT p99':>10} {'rejected':>9} {'evicted':>9}"]
    for speedup, runs in results.items():
        for index, doc in enumerate(runs, start=1):
            m, a = doc["measured"], doc["agreement"]
            lines.append(_row(f"{speedup:g}x", f"measured {index}", m, a["hit_tokens_equal_share"]))
        mean = statistics.fmean(doc["measured"]["hit_rate"] for doc in runs)
        for index, doc in enumerate(runs, start=1):
            lines.append(_row("", f"predicted {index}", doc["predicted"], None)
                         + f"  clock: {_clock(doc['predicted'].get('clock', {}))}")
        predicted = {key: statistics.fmean(doc["predicted"][key] for doc in runs)
                     for key in ("hit_rate", "ttft_p50_s", "ttft_p99_s")}
        points = (predicted["hit_rate"] - mean) * 100
        equal = min(doc["agreement"]["hit_tokens_equal_share"] for doc in runs)
        lines.append(f"{'':6} {'':11} mean predicted - mean measured hit rate: "
                     f"{points:+.2f} points (mean {mean:.2%}; target within 0.5: "
                     f"{_yes(abs(points) <= 0.5)}); "
                     f"equal hits >= 90% in every run: {_yes(equal >= 0.9)}")
        for index, doc in enumerate(runs, start=1):
            a = doc["agreement"]
            lines.append(f"{'':6} {'':11} run {index} TTFT on {a['ttft_judged_on']}: p50 "
                         f"{_x(a['ttft_p50_ratio'])}, p99 {_x(a['ttft_p99_ratio'])}")
        timed = [doc for doc in runs if doc["predicted"]["clock"]["source"] != "roofline"]
        if not timed:
            lines.append(f"{'':6} {'':11} TTFT: no run had a fitted or given clock")
            continue
        p50, p99 = _judged_ratio(timed, "ttft_p50_s"), _judged_ratio(timed, "ttft_p99_s")
        lines.append(f"{'':6} {'':11} TTFT out of sample, {len(timed)} run(s) with a fitted or "
                     f"given clock, mean predicted / mean measured: p50 x{p50:.3f}, p99 "
                     f"x{p99:.3f} (target within 20%: "
                     f"{_yes(abs(p50 - 1) <= 0.2 and abs(p99 - 1) <= 0.2)})")
    lines.append("measured TTFT: " + next(iter(results.values()))[0]["measured"]["ttft_source"])
    return "\n".join(lines)


def _row(load: str, what: str, block: dict, equal) -> str:
    share = "-" if equal is None else f"{equal:.1%}"
    evicted = "-" if block["evicted_tokens"] is None else f"{block['evicted_tokens']:,}"
    return (f"{load:>6} {what:11} {block['hit_rate']:9.2%} {share:>11} "
            f"{_ms(block['ttft_p50_s']):>10} {_ms(block['ttft_p99_s']):>10} "
            f"{block['rejected']:>9} {evicted:>9}")


def _clock(clock: dict) -> str:
    """"fitted during the drive (R^2 0.93, median 9.1%, p90 31.0%, 2,345 steps: 131.2 s in
    131.6 s)", or the roofline and why. The last figures are the steps' summed time and their
    span: equal when the timed steps cover the server's time (the fit conserves the sum)."""
    fit = clock.get("fit")
    if not fit:
        return f"{clock.get('label', 'unknown')} ({clock.get('why', '')})"
    cover = (f": {clock['steps_s']:,.1f} s in {clock['span_s']:,.1f} s"
             if "steps_s" in clock else "")
    return (f"{clock['label']} (R^2 {fit['r2']:.2f}, median {fit['median_rel_error']:.1%}, "
            f"p90 {fit['p90_rel_error']:.1%}, {fit['samples']:,} steps{cover})")


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"


def _x(value) -> str:
    return "-" if value is None else f"x{value:.3f}"


def _judged_ratio(runs: list, key: str) -> float:
    """Mean predicted over mean measured of the judged (held-out) requests' figure."""
    judged = [doc["agreement"]["judged"] for doc in runs]
    return (statistics.fmean(j["predicted"][key] for j in judged)
            / statistics.fmean(j["measured"][key] for j in judged))


def _yes(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    sys.exit(main())

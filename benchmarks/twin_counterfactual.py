"""The operator's counterfactual for bench_twin.py (issue 34 item 3): calibrate on one server,
predict another that was never measured by the clock, and measure it.

    1. sandbox A (`kvctl sandbox`: page 16, pool P, eviction lru, 8 running, context 8,192)
       `kvctl replay TRACE --against A --save-cost-model clock.json`: the calibration drive
       (its clock fitted on every step of A's drive is saved; A's own held-out figures are
       printed as a side result). A is stopped.
    2. sandbox B, fresh, another pool (default 2P) and policy (default lfu)
       `kvctl replay TRACE --against B --cost-model clock.json`: nothing of B is fitted;
       every request of B is judged (out of sample: another server, another run)
    3. printed, measured on B against predicted for B: token hit rate (target within 0.5
       points), per-request equal hit tokens (target >= 99%), TTFT p50/p99 (target within
       20%), and what changed between A and B (measured hit rate, TTFT).

Each sandbox is its own process group, started with `--json` (one ready line) and stopped
with SIGTERM; a sandbox that does not come up in 900 s stops the benchmark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVCTL = [sys.executable, "-m", "kvctl"]
COMMON = ("--port", "0", "--json", "--no-tokenizer", "--page-size", "16",
          "--context-length", "8192", "--max-running", "8")


def start_sandbox(folder: Path, name: str, pool: int, eviction: str):
    """(process, ready document) of `kvctl sandbox` with this pool and policy."""
    ready = folder / f"{name}.ready"
    cmd = [*KVCTL, "sandbox", *COMMON, "--pool-tokens", str(pool), "--eviction", eviction]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=ready.open("w"),
                            stderr=(folder / f"{name}.err").open("w"), start_new_session=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        text = ready.read_text()
        if text.strip():
            return proc, json.loads(text.splitlines()[0])
        if proc.poll() is not None:
            raise SystemExit(f"sandbox {name} exited: "
                             f"{(folder / f'{name}.err').read_text()[-400:]}")
        time.sleep(2)
    stop(proc)
    raise SystemExit(f"sandbox {name} did not become ready in 900 s")


def stop(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def against(trace: Path, url: str, speedup: float, *extra: str) -> dict:
    done = subprocess.run([*KVCTL, "replay", str(trace), "--against", url, "--speedup",
                           str(speedup), "--json", *extra], cwd=ROOT, text=True,
                          capture_output=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"kvctl replay --against failed ({done.returncode}): "
                         f"{done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def counterfactual(trace: Path, folder: Path, *, pool: int, eviction: str, other_pool: int,
                   other_eviction: str, speedup: float) -> dict:
    """Calibrate on A, predict and measure B (module docstring): both documents."""
    model = folder / "clock.json"
    docs = {}
    for name, size, policy, extra in (
            ("A", pool, eviction, ("--save-cost-model", str(model))),
            ("B", other_pool, other_eviction, ("--cost-model", str(model)))):
        began = time.monotonic()
        proc, ready = start_sandbox(folder, name, size, policy)
        try:
            print(f"  sandbox {name} (pool {size:,}, {policy}) up in "
                  f"{time.monotonic() - began:.0f} s", flush=True)
            began = time.monotonic()
            docs[name] = against(trace, ready["url"], speedup, *extra)
            one, five, _ = os.getloadavg()
            print(f"  {name} drive: {time.monotonic() - began:.0f} s (host load average "
                  f"{one:.1f} / {five:.1f})", flush=True)
        finally:
            stop(proc)
        if name == "A" and docs["A"].get("saved_cost_model") != str(model):
            raise SystemExit(f"the calibration drive saved no clock: "
                             f"{docs['A'].get('saved_cost_model')}")
    return docs


def report(docs: dict, *, pool: int, eviction: str, other_pool: int, other_eviction: str,
           speedup: float) -> str:
    a, b = docs["A"], docs["B"]
    ma, mb, pb, ag = a["measured"], b["measured"], b["predicted"], b["agreement"]
    judged_b = ag["judged"]
    points = ag["hit_rate_points"]
    p50, p99 = ag["ttft_p50_ratio"], ag["ttft_p99_ratio"]
    held = a["agreement"]
    lines = [
        f"counterfactual (arrivals / {speedup:g}): calibrated on A (pool {pool:,}, {eviction}), "
        f"predicted B (pool {other_pool:,}, {other_eviction}) with A's clock "
        f"({a['clock'].get('samples', 0):,} steps of A's drive, saved: "
        f"{b['clock']['label']})",
        f"  A measured: hit rate {ma['hit_rate']:.2%}, TTFT p50 {_s(ma['ttft_p50_s'])}, p99 "
        f"{_s(ma['ttft_p99_s'])}; A's own twin on {held['ttft_judged_on']}: TTFT p50 "
        f"x{held['ttft_p50_ratio']:.3f}, p99 x{held['ttft_p99_ratio']:.3f}",
        f"  B measured: hit rate {mb['hit_rate']:.2%}, TTFT p50 {_s(mb['ttft_p50_s'])}, p99 "
        f"{_s(mb['ttft_p99_s'])}",
        f"  B predicted: hit rate {pb['hit_rate']:.2%}, TTFT p50 "
        f"{_s(judged_b['predicted']['ttft_p50_s'])}, p99 "
        f"{_s(judged_b['predicted']['ttft_p99_s'])} (judged on {ag['ttft_judged_on']})",
        f"  B hit rate predicted - measured: {points:+.2f} points (target within 0.5: "
        f"{_yes(abs(points) <= 0.5)}); equal hit tokens {ag['hit_tokens_equal_share']:.1%} of "
        f"{ag['requests_compared']:,} (target >= 99%: "
        f"{_yes(ag['hit_tokens_equal_share'] >= 0.99)})",
        f"  B TTFT predicted / measured: p50 x{p50:.3f}, p99 x{p99:.3f} (target within 20%: "
        f"{_yes(abs(p50 - 1) <= 0.2 and abs(p99 - 1) <= 0.2)}); end-to-end p50 "
        f"x{ag['e2e_p50_ratio']:.3f}, p99 x{ag['e2e_p99_ratio']:.3f}",
        f"  rejected: measured {mb['rejected']}, predicted {pb['rejected']}",
    ]
    return "\n".join(lines)


def _s(value) -> str:
    return "-" if value is None else f"{value:,.2f} s"


def _yes(met: bool) -> str:
    return "met" if met else "NOT met"

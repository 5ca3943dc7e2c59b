"""The GPU check's report: every step and figure of benchmarks/gpu_check.sh as one JSON file.

    python benchmarks/gpu/check_report.py WORKDIR OUT_JSON [--budget S] [--seconds S]

Reads the step table (WORKDIR/steps.tsv: name, status, seconds, expected, cap, detail) and the
outputs the steps left in WORKDIR (env.json, probe.json, replay.json, rust-core.json,
gputests.txt, ledger.jsonl, hits.json, inspect.json, load-on.json, load-off.json; a missing or
unreadable one is recorded as null, never as a zero), writes them to OUT_JSON with the
throughput ratio, and prints a summary. Exit 0 when every step of the plan passed (rust-core is
informational), else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUTPUTS = ("env.json", "probe.json", "replay.json", "rust-core.json", "hits.json",
           "inspect.json", "load-on.json", "load-off.json")
PLANNED = ("env", "install", "probe", "replay", "check", "rust-core", "gputests", "server-on",
           "ledger", "hits", "inspect", "load-on", "server-off", "load-off")
INFORMATIONAL = {"rust-core"}  # recorded, not part of the verdict


def read_json(path: Path):
    """The file's last JSON line (the probes print one), or None."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def read_steps(path: Path) -> list[dict]:
    steps = []
    for line in path.read_text().splitlines() if path.exists() else ():
        name, status, seconds, expected, cap, detail = line.split("\t")
        steps.append({"step": name, "status": status, "seconds": int(seconds),
                      "expected_s": int(expected), "cap_s": int(cap), "detail": detail})
    return steps


def build(work: Path, budget: int, seconds: int | None) -> dict:
    steps = read_steps(work / "steps.tsv")
    ran = {s["step"] for s in steps}
    steps += [{"step": name, "status": "NOT RUN", "seconds": None} for name in PLANNED
              if name not in ran]
    report = {"budget_s": budget, "seconds": seconds, "steps": steps}
    for name in OUTPUTS:
        report[name.rsplit(".", 1)[0].replace("-", "_")] = read_json(work / name)
    try:  # pytest's closing line, e.g. "4 passed in 20.1s"
        report["gputests"] = (work / "gputests.txt").read_text().strip().splitlines()[-1]
    except (OSError, IndexError):
        report["gputests"] = None
    ledger = work / "ledger.jsonl"
    samples = ([json.loads(x) for x in ledger.read_text().splitlines() if x.startswith("{")]
               if ledger.exists() else [])
    report["ledger"] = {"reads": samples[:-1], "summary": samples[-1] if samples else None}
    on, off = report["load_on"], report["load_off"]
    report["overhead"] = None
    if on and off and on.get("output_tokens_per_s") and off.get("output_tokens_per_s"):
        report["overhead"] = {
            "tokens_per_s_on": on["output_tokens_per_s"],
            "tokens_per_s_off": off["output_tokens_per_s"],
            "time_ratio_on_over_off": round(off["output_tokens_per_s"]
                                            / on["output_tokens_per_s"], 3)}
    report["passed"] = all(s["status"] == "PASS" for s in steps
                           if s["step"] not in INFORMATIONAL)
    return report


def summary(report: dict) -> str:
    rows = [f"{'step':<11}{'status':<9}{'seconds':>8}{'expected':>10}"]
    for s in report["steps"]:
        took = "-" if s["seconds"] is None else s["seconds"]
        rows.append(f"{s['step']:<11}{s['status']:<9}{took:>8}{s.get('expected_s', '-'):>10}")
    env, hits, ledger = report["env"] or {}, report["hits"] or {}, report["ledger"]["summary"]
    rows.append(f"gpu: {env.get('gpu')}  torch {env.get('torch')}  triton {env.get('triton')}")
    rows.append(f"gpu tests: {report['gputests']}")
    rows.append(f"ledger: {ledger}")
    rows.append(f"hits: plugin {hits.get('plugin_hit_tokens')} vs SGLang "
                f"{hits.get('sglang_cached_tokens')} cached tokens")
    rows.append(f"throughput: {report['overhead']} (one measured run each; noisy)")
    rows.append(f"total {report['seconds']} s of a {report['budget_s']} s budget; "
                f"{'PASSED' if report['passed'] else 'FAILED'}")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check_report.py")
    parser.add_argument("work", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget", type=int, default=540)
    parser.add_argument("--seconds", type=int, default=None)
    args = parser.parse_args(argv)
    report = build(args.work, args.budget, args.seconds)
    args.out.write_text(json.dumps(report, indent=1))
    print("\n== summary (" + str(args.out) + ")\n" + summary(report))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The wheel set at run time: a real SGLang server with kvctl's plugin, in this interpreter.

    python benchmarks/gpu/prove_runtime.py --workdir DIR [--requests 16]

Run by benchmarks/gpu_wheels.sh --prove under the Python 3.12 environment that stands in for
the lent machine's image (PYTHONPATH = the carried wheels' target folder, then the repository).
It starts tests/e2e/sglang_server.py's server (SGLang's CPU path through the test platform: no
GPU here) with KVCTL_SGLANG_PLUGIN=1 and the check's tree core (SGLang's Python one, see
nokernel_settings.TREE_CORE), kvctl's plugin found through a generated dist-info, as
on the device; then runs the GPU check's own probes against it (benchmarks/gpu_check_load.py
`hits` and `ledger`, small loads), so what the server imports lazily (metrics, KV events,
the plugin's HTTP server, kvctl inspect) is exercised too. Prints one JSON line; exit 1 when
the server does not come up or a probe fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.gpu.dist_info import write_all  # noqa: E402
from benchmarks.gpu.nokernel_settings import TREE_CORE  # noqa: E402
from e2e.sglang_server import SGLangServer, ServerFailed, free_port  # noqa: E402

VOCAB = 512  # tests/e2e/sglang_server.py's tiny model


def probe(mode: str, server: SGLangServer, plugin_url: str, requests: int,
          new_tokens: int) -> dict:
    """One gpu_check_load.py run against the server: exit code and its last JSON line."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check_load.py"), mode, "--url",
         server.url, "--plugin-url", plugin_url, "--requests", str(requests), "--concurrency",
         "4", "--groups", "2", "--prefix", "64", "--suffix", "8", "--new-tokens", str(new_tokens),
         "--vocab", str(VOCAB), "--every", "0.2"],
        capture_output=True, text=True, timeout=600)
    last = done.stdout.strip().splitlines()[-1:] or ["{}"]
    return {"exit": done.returncode, "seconds": round(time.monotonic() - started, 1),
            "result": json.loads(last[0]) if last[0].startswith("{") else last[0],
            "stderr": done.stderr[-400:] if done.returncode else ""}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="prove_runtime.py")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--requests", type=int, default=16)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    dists = args.workdir / "dists"
    write_all(dists)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(dists), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    plugin_port = free_port()
    # the pool is capped by --max-total-tokens; a larger static fraction only keeps SGLang's
    # memory profile (psutil on a CPU shared with other work) from refusing to start
    server = SGLangServer(args.workdir, extra_args=("--mem-fraction-static", "0.3"), extra_env={
        "KVCTL_SGLANG_PLUGIN": "1", "KVCTL_PLUGIN_PORT": str(plugin_port),
        "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": TREE_CORE})
    report: dict = {"python": sys.version.split()[0]}
    try:
        report["startup_s"] = round(server.start(), 1)
        plugin_url = f"http://127.0.0.1:{plugin_port}"
        report["hits"] = probe("hits", server, plugin_url, args.requests, 4)
        # long enough on two CPU cores that reads (a kvctl process each) see requests running
        report["ledger"] = probe("ledger", server, plugin_url, 3 * args.requests, 48)
    except ServerFailed as exc:
        report["server"] = f"failed: {str(exc)[-1500:]}"
    finally:
        server.stop()
    report["ok"] = all(report.get(k, {}).get("exit") == 0 for k in ("hits", "ledger"))
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The kvctl plugin inside a real `python -m sglang.launch_server`: a check for a GPU machine.

Launches SGLang twice on the tiny Llama config (engine_adapter/embedded/data: random weights
via `--load-format dummy`, requests carry `input_ids` via `--skip-tokenizer-init`, metrics
and KV events on loopback): first with the plugin off, then with `KVCTL_SGLANG_PLUGIN=1`.
Each time it sends the same requests through `/generate` (groups sharing 256-token prefixes,
16 at a time). With the plugin on it polls `/snapshot` while the requests run and checks:

    /server_info names kvctl_plugin          schema_version 1, the endpoint's URL
    /healthz                                 status ok, no failures
    every snapshot read while busy           pool ledger residual 0, delta_ref max 0
                                             (token level every sample, per node at the
                                             tree cadence), protected/private observable
    after the requests                       funnel requests >= requests sent, hits > 0,
                                             decoded schema_version matches

and prints the throughput (requests/s, output tokens/s) with the plugin off and on and their
ratio. Exit 1 when a check fails. Needs CUDA and SGLang's server dependencies: it launches
SGLang's default model runner, and is NOT run in CI. The same checks on a CPU-only machine
run in tests/e2e/test_e2e_plugin.py, where SGLang's server starts through the out-of-tree
CPU platform (docs/cpu-server.md).

    .venv/bin/python benchmarks/plugin_server_check.py [--requests 128] [--timeout 600]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL_DIR = Path(__file__).resolve().parents[1] / "engine_adapter" / "embedded" / "data"
MAX_NEW = 32


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, timeout: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _generate(base: str, input_ids: list[int]) -> int:
    body = json.dumps({"input_ids": input_ids, "sampling_params": {
        "max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True}}).encode()
    request = urllib.request.Request(base + "/generate", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        doc = json.loads(response.read())
    return len(doc.get("output_ids") or []) or MAX_NEW


def _prompts(count: int) -> list[list[int]]:
    """Groups of 8 requests sharing a 256-token prefix, each with its own 64-token suffix."""
    prompts = []
    for i in range(count):
        group, member = divmod(i, 8)
        prefix = [10 + (group * 7 + j) % 900 for j in range(256)]
        prompts.append(prefix + [10 + (i * 13 + j) % 900 for j in range(64)])
    return prompts


class Server:
    """One `sglang.launch_server` in its own process group, stopped by `close()`."""

    def __init__(self, *, plugin: bool, plugin_port: int, log_dir: Path, timeout: float) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        events = _free_port()
        env = dict(os.environ)
        env.pop("SGLANG_PLUGINS", None)
        env["KVCTL_SGLANG_PLUGIN"] = "1" if plugin else "0"
        env["KVCTL_PLUGIN_PORT"] = str(plugin_port)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        command = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(MODEL_DIR),
                   "--load-format", "dummy", "--skip-tokenizer-init", "--enable-metrics",
                   "--host", "127.0.0.1", "--port", str(self.port), "--page-size", "16",
                   "--mem-fraction-static", "0.3", "--kv-events-config",
                   json.dumps({"publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{events}"})]
        self.log = open(log_dir / f"server-plugin-{'on' if plugin else 'off'}.log", "w")
        self.process = subprocess.Popen(command, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}; see "
                                   f"{self.log.name}")
            try:
                urllib.request.urlopen(self.base + "/health", timeout=5).close()
                return
            except OSError:
                time.sleep(2)
        self.close()
        raise RuntimeError(f"server not healthy after {timeout:.0f} s; see {self.log.name}")

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def _run(base: str, prompts: list[list[int]]) -> tuple[float, int]:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=16) as pool:
        outputs = sum(pool.map(lambda ids: _generate(base, ids), prompts))
    return time.perf_counter() - started, outputs


def _watch(plugin_url: str, stop: threading.Event, reads: list) -> None:
    """Decode /snapshot every 0.2 s until `stop` (the client's view, schema checked)."""
    from engine_adapter.snapshot_codec import check_schema, decode_snapshot

    while not stop.is_set():
        try:
            doc = _get(plugin_url + "/snapshot")
            check_schema(doc)
            reads.append(decode_snapshot(doc["snapshot"]))
        except OSError:
            pass  # 503 before the first sample
        stop.wait(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to start a server")
    args = parser.parse_args(argv)
    prompts = _prompts(args.requests)
    problems: list[str] = []
    log_dir = Path(tempfile.mkdtemp(prefix="kvctl-plugin-check-"))
    plugin_port = _free_port()
    results = {}
    for plugin in (False, True):
        server = Server(plugin=plugin, plugin_port=plugin_port, log_dir=log_dir,
                        timeout=args.timeout)
        try:
            _run(server.base, prompts[:8])  # warm-up, not timed
            reads: list = []
            stop = threading.Event()
            plugin_url = f"http://127.0.0.1:{plugin_port}"
            watcher = threading.Thread(target=_watch, args=(plugin_url, stop, reads))
            if plugin:
                watcher.start()
            results[plugin] = _run(server.base, prompts)
            if plugin:
                time.sleep(2.5)  # one more ledger sample after the last request
                stop.set()
                watcher.join()
                problems += _check(server.base, plugin_url, reads, len(prompts) + 8)
        finally:
            server.close()
    for plugin, (wall, outputs) in results.items():
        print(f"plugin {'on ' if plugin else 'off'}: {len(prompts) / wall:8.2f} requests/s  "
              f"{outputs / wall:10.1f} output tokens/s  ({wall:.2f} s)")
    print(f"throughput ratio on/off: {results[False][0] / results[True][0]:.4f}")
    for problem in problems:
        print(f"FAIL: {problem}")
    print("plugin checks: " + ("all passed" if not problems else f"{len(problems)} failed")
          + f" (server logs in {log_dir})")
    return 1 if problems else 0


def _check(base: str, plugin_url: str, reads: list, sent: int) -> list[str]:
    problems = []
    info = _get(base + "/server_info").get("kvctl_plugin")
    if not info or info.get("schema_version") != 1 or info.get("url") != plugin_url:
        problems.append(f"/server_info kvctl_plugin is {info!r}, expected url {plugin_url}")
    health = _get(plugin_url + "/healthz")
    if health.get("status") != "ok" or health.get("failures"):
        problems.append(f"/healthz: {health}")
    if len(reads) < 3:
        problems.append(f"only {len(reads)} snapshots read while requests ran")
    busy = [s for s in reads if s.ledger.private_tokens]
    if not busy:
        problems.append("no snapshot saw private tokens (requests running)")
    for snap in reads:
        if snap.ledger.residual_tokens != 0 or snap.refs.delta_ref_max != 0:
            problems.append(f"seq {snap.seq}: residual {snap.ledger.residual_tokens}, "
                            f"delta_ref max {snap.refs.delta_ref_max}, delta protected "
                            f"{snap.refs.delta_protected_tokens}")
            break
    if not any(s.refs.per_node for s in reads):
        problems.append("no per-node tree read while requests ran")
    last = reads[-1] if reads else None
    if last is not None:
        admitted = last.funnel.stage("requests").requests
        if admitted < sent:  # more: SGLang's /health may run its own health-check request
            problems.append(f"funnel saw {admitted} requests, {sent} were sent")
        if not last.funnel.hit_tokens:
            problems.append("no prefix hit tokens although prompts share 256-token prefixes")
    return problems


if __name__ == "__main__":
    sys.exit(main())

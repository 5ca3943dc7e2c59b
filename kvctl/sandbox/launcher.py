"""Start and stop SGLang 0.5.23's own `python -m sglang.launch_server` on this CPU.

The server is SGLang's production code (HTTP server, tokenizer manager, scheduler, radix tree,
allocator, `/metrics`, ZMQ KV-event publisher) with a tiny dummy-weight Llama and
`--skip-tokenizer-init` (requests carry `input_ids`); only the math kernels differ from a GPU
server (cpu_platform.py). With `config.plugin` kvctl's plugin runs in every scheduler
(KVCTL_SGLANG_PLUGIN=1, loopback, one port per DP rank).

    SandboxServer(config, workdir)   resolves ports (checked free), writes files.py's files
      .start()                       launches, waits for /server_info, warms every DP rank up,
                                     flushes, waits for the plugin; raises SandboxFailed
                                     (one line with the log's tail) when it cannot
      .generate(ids) .flush_cache() .server_info()   SGLang's HTTP API
      .stop()                        SIGTERM to the process group, then SIGKILL
      .restart()                     stop + start on the same ports

The server runs in a session of its own, so a Ctrl-C in the terminal reaches kvctl, which
stops it; its log goes to workdir/server-N.log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kvctl.errors import RuntimeFailure
from kvctl.sandbox import files
from kvctl.sandbox.config import SandboxConfig
from kvctl.sandbox.ports import free_block, require_free

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the tree kvctl (and its plugin) load from


class SandboxFailed(RuntimeFailure):
    """The server exited or did not become ready; the message carries the log's tail."""


class SandboxServer:
    """One real SGLang server process (see the module docstring)."""

    def __init__(self, config: SandboxConfig, workdir: Path, *,
                 model_dir: Path | None = None, avoid: set[int] | None = None) -> None:
        """model_dir: a model dir files.write_model already wrote, shared with other servers
        (a fleet: SGLang's router groups workers by model path, fleet.py); else its own.
        avoid: ports other servers of a fleet were given (ports.free_block), updated."""
        config.check()
        self.config = config
        self.workdir = workdir
        host, dp = config.host, config.dp_size
        if config.port:
            require_free("--port", config.port, 1, host)
        self.port = config.port or free_block(1, host, avoid)
        if config.plugin and config.plugin_port:
            require_free("--plugin-port", config.plugin_port, dp, host)
        self.plugin_port = config.plugin_port or free_block(dp, host, avoid)
        self.events_port = free_block(dp, host, avoid)
        self.replay_port = free_block(dp, host, avoid)
        self.model_dir = model_dir or files.write_model(workdir / "model", config.context_length)
        self.dist_dir = files.write_dists(workdir / "dist", plugin=config.plugin)
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.startup_s: float | None = None
        self.log_path = workdir / "server-1.log"

    # ---- addresses ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def events_endpoint(self) -> str:
        return f"tcp://{self.config.host}:{self.events_port}"

    @property
    def plugin_urls(self) -> list[str]:
        """One endpoint per DP rank; empty without the plugin."""
        if not self.config.plugin:
            return []
        return [f"http://{self.config.host}:{self.plugin_port + r}"
                for r in range(self.config.dp_size)]

    @property
    def plugin_url(self) -> str | None:
        return self.plugin_urls[0] if self.plugin_urls else None

    # ---- process ------------------------------------------------------------------------

    def command(self) -> list[str]:
        events = {"publisher": "zmq", "endpoint": self.events_endpoint,
                  "replay_endpoint": f"tcp://{self.config.host}:{self.replay_port}",
                  "topic": "kv"}
        return [sys.executable, "-m", "sglang.launch_server", "--model-path",
                str(self.model_dir), *self.config.server_args(port=self.port, events=events)]

    def environment(self) -> dict[str, str]:
        path = [str(self.dist_dir), str(SOURCE_ROOT)]
        env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
        env.update({
            "PYTHONPATH": os.pathsep.join(path + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "SGLANG_PLATFORM": files.PLATFORM_NAME,
            "OMP_NUM_THREADS": "1",  # a laptop's cores stay free for the client
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        })  # fmt: skip
        if self.config.dp_size > 1:  # one core per rank; else the CPU platform wants NUMA nodes
            cores = os.cpu_count() or 1
            env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(
                str(r % cores) for r in range(self.config.dp_size))
        if self.config.plugin:
            env.update({"KVCTL_SGLANG_PLUGIN": "1", "KVCTL_PLUGIN_HOST": self.config.host,
                        "KVCTL_PLUGIN_PORT": str(self.plugin_port),
                        "KVCTL_PLUGIN_LEDGER_S": str(self.config.plugin_ledger_s)})
            if self.config.record:
                env["KVCTL_RECORD"] = "1"
        env.update(self.config.extra_env)
        return env

    def start(self, timeout_s: float = 600.0) -> float:
        """Launch and wait until ready; returns (and keeps) the start-up seconds."""
        self.starts += 1
        self.log_path = self.workdir / f"server-{self.starts}.log"
        began = time.monotonic()
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                self.command(), cwd=self.workdir, env=self.environment(), stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = began + timeout_s
        while not self._ready():
            if self.process.poll() is not None:
                raise self._failed(f"sglang.launch_server exited {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise self._failed(f"not ready after {timeout_s:.0f} s")
            time.sleep(1.0)
        # SGLang's pool gauges appear once a scheduler has logged a batch: one request per
        # DP rank (the DP controller deals them round-robin), then an empty tree
        for rank in range(self.config.dp_size):
            self.generate([1, 2, 3 + rank])
        if not self.flush_cache(wait_s=30):
            raise self._failed("/flush_cache refused after the warm-up")
        if self.config.plugin:
            self._wait_for_plugin(deadline)
        self.startup_s = time.monotonic() - began
        return self.startup_s

    def _ready(self) -> bool:
        try:  # /server_info answers once the scheduler is up
            return self._get("/server_info")[0] == 200
        except OSError:
            return False

    def _wait_for_plugin(self, deadline: float) -> None:
        for url in self.plugin_urls:
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as reply:
                        if reply.status == 200:
                            break
                except (OSError, urllib.error.HTTPError):
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise self._failed(f"kvctl's plugin did not answer at {url}/healthz")
                time.sleep(0.5)

    def _failed(self, what: str) -> SandboxFailed:
        return SandboxFailed(f"{what}; log {self.log_path}: ... {self.short_tail()}")

    def short_tail(self, lines: int = 3, width: int = 200) -> str:
        """The log's last lines on one line, each cut to `width` (SGLang logs its whole
        server_args on one line)."""
        return " | ".join(line if len(line) <= width else line[:width] + "..."
                          for line in self.log_tail(lines).splitlines())

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        try:  # the server's children share its process group; none may outlive it
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def restart(self) -> float:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])

    # ---- HTTP ---------------------------------------------------------------------------

    def _get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout_s) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def _post(self, path: str, body: dict | None, timeout_s: float) -> tuple[int, bytes]:
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def server_info(self) -> dict:
        status, body = self._get("/server_info")
        if status != 200:
            raise SandboxFailed(f"/server_info answered {status}")
        return json.loads(body)

    def generate(self, input_ids: list[int], *, max_new_tokens: int = 1,
                 timeout_s: float = 120.0, ignore_eos: bool = False) -> dict:
        body = {"input_ids": input_ids,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                    "ignore_eos": ignore_eos}}
        status, reply = self._post("/generate", body, timeout_s)
        if status != 200:
            raise SandboxFailed(f"/generate answered {status}: {reply[:200]!r}")
        return json.loads(reply)

    def flush_cache(self, wait_s: float = 0.0) -> bool:
        """POST /flush_cache (SGLang refuses while requests run); retried for `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            if self._post("/flush_cache", None, 30.0)[0] == 200:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

"""TEST-ONLY: start and stop a real `python -m sglang.launch_server` on this CPU.

The server is SGLang 0.5.23's own (HTTP server, tokenizer manager, scheduler, radix tree,
allocator, `/metrics`, ZMQ KV-event publisher) with a tiny dummy-weight Llama
(`--load-format dummy`, no download) and `--skip-tokenizer-init` (requests carry
`input_ids`). Only the math kernels differ from a GPU server: the out-of-tree platform in
tests/support/sglang_cpu_platform selects SGLang's torch-native paths (see its docstring).

    SGLangServer(workdir)          writes the model config and the platform's entry point
      .start()                     launches, waits for /server_info, warms up, flushes
      .generate(ids, max_new=1)    POST /generate with input_ids -> SGLang's JSON reply
      .flush_cache()               POST /flush_cache -> True when SGLang flushed
      .stop()                      SIGTERM to the process group, then SIGKILL
      .restart()                   stop + start on the same ports

Ports are picked free on 127.0.0.1 once and kept across restarts, so a client attached by
URL sees the same server come back. The log goes to `workdir/server-N.log`; a start that
fails raises with its tail. Not a test module; imported by name from tests/e2e.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLATFORM_DIR = ROOT / "tests" / "support" / "sglang_cpu_platform"
PLATFORM_MODULE = "kvctl_test_cpu_platform"
PLATFORM_NAME = "kvctl_test_cpu"

PAGE = 4
POOL_TOKENS = 1024
# A tiny Llama (tests/fixtures/tiny_llama's shape, a smaller vocabulary): random weights.
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 512,
    "max_position_embeddings": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-05,
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
}  # fmt: skip


SERVER_IMPORTS = ("uvicorn", "fastapi", "uvloop", "setproctitle", "xgrammar", "sglang")


def missing_server_imports() -> list[str]:
    """What `sglang.launch_server` imports that this venv lacks (requirements/server.txt)."""
    import importlib.util

    return [name for name in SERVER_IMPORTS if importlib.util.find_spec(name) is None]


def skip_reason() -> str | None:
    missing = missing_server_imports()
    if not missing:
        return None
    return (f"SGLang server imports missing ({', '.join(missing)}): "
            "make setup installs requirements/server.txt")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_platform_dist(target: Path) -> None:
    """A minimal installed-distribution record so importlib.metadata finds the entry point."""
    dist = target / "kvctl_test_cpu_platform-0.0.0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kvctl-test-cpu-platform\nVersion: 0.0.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[sglang.srt.platforms]\n{PLATFORM_NAME} = {PLATFORM_MODULE}:activate\n"
    )


class ServerFailed(RuntimeError):
    """The server exited or did not become ready; the message carries the log's tail."""


class SGLangServer:
    """One real SGLang server process on loopback (see the module docstring)."""

    def __init__(self, workdir: Path, *, extra_args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.model_dir = workdir / "model"
        self.model_dir.mkdir(parents=True, exist_ok=True)
        (self.model_dir / "config.json").write_text(json.dumps(TINY_CONFIG))
        self.dist_dir = workdir / "platform-dist"
        _write_platform_dist(self.dist_dir)
        self.port, self.events_port, self.replay_port = free_port(), free_port(), free_port()
        self.extra_args, self.extra_env = extra_args, dict(extra_env or {})
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.startup_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.events_port}"

    def command(self) -> list[str]:
        events = {"publisher": "zmq", "endpoint": self.events_endpoint,
                  "replay_endpoint": f"tcp://127.0.0.1:{self.replay_port}", "topic": "kv"}
        return [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", str(self.model_dir), "--load-format", "dummy",
            "--skip-tokenizer-init", "--device", "cpu", "--attention-backend", "torch_native",
            "--disable-cuda-graph", "--host", "127.0.0.1", "--port", str(self.port),
            "--page-size", str(PAGE), "--max-total-tokens", str(POOL_TOKENS),
            "--context-length", "512", "--mem-fraction-static", "0.05",
            "--max-running-requests", "8", "--enable-metrics",
            # SGLang's warm-up would race the readiness flush; start() sends its own
            "--skip-server-warmup",
            "--kv-events-config", json.dumps(events), *self.extra_args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        path = [str(PLATFORM_DIR), str(self.dist_dir), str(ROOT)]
        env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
        env.update({
            "PYTHONPATH": os.pathsep.join(path + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "SGLANG_PLATFORM": PLATFORM_NAME,
            "OMP_NUM_THREADS": "1",  # two cores, shared with the test process
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            **self.extra_env,
        })  # fmt: skip
        return env

    def start(self, timeout_s: float = 420.0) -> float:
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
                raise ServerFailed(f"sglang.launch_server exited {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServerFailed(f"not ready after {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(1.0)
        # our own warm-up: SGLang's pool gauges appear once the scheduler has logged a batch
        self.generate([1, 2, 3])
        if not self.flush_cache(wait_s=30):
            raise ServerFailed(f"/flush_cache refused after the warm-up:\n{self.log_tail()}")
        self.startup_s = time.monotonic() - began
        return self.startup_s

    def _ready(self) -> bool:
        try:  # /server_info answers once the scheduler is up
            return self._get("/server_info")[0] == 200
        except OSError:
            return False

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        # the server's children share its process group; make sure none outlives it
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def restart(self) -> float:
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # ---- HTTP -------------------------------------------------------------------------

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
            raise ServerFailed(f"/server_info answered {status}")
        return json.loads(body)

    def generate(self, input_ids: list[int], *, max_new_tokens: int = 1,
                 timeout_s: float = 120.0, ignore_eos: bool = False) -> dict:
        body = {"input_ids": input_ids,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0,
                                    "ignore_eos": ignore_eos}}
        status, reply = self._post("/generate", body, timeout_s)
        if status != 200:
            raise ServerFailed(f"/generate answered {status}: {reply[:200]!r}")
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

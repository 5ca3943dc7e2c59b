"""TEST-ONLY: start and stop a real `python -m sglang.launch_server` on this CPU, through
`kvctl sandbox`'s launcher (kvctl/sandbox/launcher.py), at the e2e tests' sizes.

The server is SGLang 0.5.23's own (HTTP server, tokenizer manager, scheduler, radix tree,
allocator, `/metrics`, ZMQ KV-event publisher) with a tiny dummy-weight Llama
(`--load-format dummy`, no download) and `--skip-tokenizer-init` (requests carry
`input_ids`). Only the math kernels differ from a GPU server: the sandbox's out-of-tree
platform (kvctl/sandbox/cpu_platform.py) selects SGLang's torch-native paths.

    SGLangServer(workdir)          writes the model config and the platform's entry point
      .start()                     launches, waits for /server_info, warms up, flushes
      .generate(ids, max_new=1)    POST /generate with input_ids -> SGLang's JSON reply
      .flush_cache()               POST /flush_cache -> True when SGLang flushed
      .stop()                      SIGTERM to the process group, then SIGKILL
      .restart()                   stop + start on the same ports

Unlike the sandbox's default, the plugin is off unless `extra_env` enables it (the shared
server stays plugin-free) and the pool is PAGE x POOL_TOKENS. Ports are picked free on
127.0.0.1 once and kept across restarts, so a client attached by URL sees the same server come
back. The log goes to `workdir/server-N.log`; a start that fails raises ServerFailed with its
tail. Not a test module; imported by name from tests/e2e.
"""

from __future__ import annotations

from pathlib import Path

from kvctl.sandbox.config import SandboxConfig
from kvctl.sandbox.files import TINY_CONFIG  # noqa: F401 (re-exported for tests)
from kvctl.sandbox.launcher import SandboxFailed as ServerFailed
from kvctl.sandbox.launcher import SandboxServer
from kvctl.sandbox.ports import free_block

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4
POOL_TOKENS = 1024
CONTEXT = 512

SERVER_IMPORTS = ("uvicorn", "fastapi", "uvloop", "setproctitle", "xgrammar", "sglang")

__all__ = ["PAGE", "POOL_TOKENS", "ROOT", "SGLangServer", "ServerFailed", "free_port", "skip_reason"]


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
    """A free loopback port below the kernel's ephemeral range (kvctl/sandbox/ports.py: a
    port bind(0) picks can be taken by any outgoing connection before the server binds it)."""
    return free_block(1)


class SGLangServer(SandboxServer):
    """One real SGLang server process on loopback (see the module docstring).

    `config` overrides the e2e sizes (e.g. `SandboxConfig(dp_size=2, plugin=True, ...)`);
    extra_args / extra_env are appended to whatever config gives."""

    def __init__(self, workdir: Path, *, extra_args: tuple[str, ...] = (),
                 extra_env: dict[str, str] | None = None,
                 config: SandboxConfig | None = None) -> None:
        base = config or SandboxConfig(page_size=PAGE, pool_tokens=POOL_TOKENS,
                                       context_length=CONTEXT, max_running=8, plugin=False)
        base = SandboxConfig(**{**base.__dict__, "port": 0, "plugin_port": 0,
                                "extra_args": (*base.extra_args, *extra_args),
                                "extra_env": {**base.extra_env, **(extra_env or {})}})
        workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(base, workdir)
        self.extra_args, self.extra_env = base.extra_args, base.extra_env

    @property
    def plugin_url(self) -> str | None:
        """The sandbox's rank-0 plugin URL, or the one a test set (a plugin it enabled
        through extra_env on a port of its choosing)."""
        return self.__dict__.get("_plugin_url") or super().plugin_url

    @plugin_url.setter
    def plugin_url(self, url: str) -> None:
        self.__dict__["_plugin_url"] = url

    def start(self, timeout_s: float = 420.0) -> float:
        return super().start(timeout_s)

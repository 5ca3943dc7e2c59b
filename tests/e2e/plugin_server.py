"""A real SGLang server with kvctl's plugin loaded, for a test module's fixture.

    with started_plugin_server(tmp_dir, extra_args=(...), env={...}) as server:
        server.plugin_url   # http://127.0.0.1:PORT, the plugin's own endpoint

KVCTL_SGLANG_PLUGIN=1 and a free KVCTL_PLUGIN_PORT are set here; `env` adds the module's
cadences and switches. Skips (a failure under CI=true, tests/conftest.py) when SGLang's
server imports are missing; the server is stopped however the block ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e.sglang_server import SGLangServer, free_port, skip_reason


@contextmanager
def started_plugin_server(workdir: Path, *, extra_args: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> Iterator[SGLangServer]:
    if reason := skip_reason():
        pytest.skip(reason)
    port = free_port()
    server = SGLangServer(workdir, extra_args=tuple(extra_args),
                          extra_env={"KVCTL_SGLANG_PLUGIN": "1", "KVCTL_PLUGIN_PORT": str(port),
                                     **(env or {})})
    server.plugin_url = f"http://127.0.0.1:{port}"
    try:
        server.start()
        yield server
    finally:
        server.stop()

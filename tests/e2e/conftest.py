"""The real SGLang server the e2e tests share: started once for tests/e2e (package scope),
stopped after the last of them, its start-up time printed.

It needs SGLang's HTTP-server imports (requirements/server.txt, installed by `make setup`).
Without them every e2e test is skipped with that reason (a failure under CI=true, where
`make setup` installed them); a server that has them but does not come up is an error with
the server log's tail, never a skip.
"""

from __future__ import annotations

import pytest

from e2e.sglang_server import SGLangServer, skip_reason


@pytest.fixture(scope="package")
def sglang_server(tmp_path_factory, pytestconfig):
    if reason := skip_reason():
        pytest.skip(reason)
    server = SGLangServer(tmp_path_factory.mktemp("sglang-server"))
    try:
        seconds = server.start()
        _print(pytestconfig, f"e2e: real SGLang server {server.url} up in {seconds:.1f} s")
        yield server
    finally:
        server.stop()


def _print(pytestconfig, line: str) -> None:
    """A line on the terminal even while pytest captures output (the start-up time)."""
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if capture is None or reporter is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"\n{line}")


@pytest.fixture
def server(sglang_server):
    """The shared server, running, idle and with an empty radix tree."""
    if sglang_server.process is None or sglang_server.process.poll() is not None:
        sglang_server.start()
    assert sglang_server.flush_cache(wait_s=30), "the server did not flush (requests still running?)"
    return sglang_server

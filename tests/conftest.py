"""Shared fixtures for the engine tests.

`sglang_ready` imports SGLang's cache modules once per session (4-10 s on 2 cores), so the
first engine test does not carry the import in its own time. `make_engine(**overrides)`
builds an `EmbeddedEngine` from a small default `EngineConfig`; each call publishes SGLang's
process-wide runtime context, so a test drives one engine at a time (build, use, drop).
Neither fixture is autouse: unit tests never import SGLang.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import pytest

SMALL_ENGINE = dict(
    pool_tokens=2048,
    page_size=16,
    token_budget=1024,
    max_running_requests=16,
    max_context_len=2048,
)


@pytest.fixture(scope="session")
def sglang_ready() -> None:
    """Import SGLang's scheduler-side cache stack once (skips the test without SGLang)."""
    pytest.importorskip("torch")
    pytest.importorskip("sglang")
    import sglang.srt.managers.schedule_batch  # noqa: F401
    import sglang.srt.mem_cache.unified_radix_cache  # noqa: F401


@pytest.fixture
def make_engine(sglang_ready) -> Callable[..., object]:
    """Factory: `make_engine(**EngineConfig overrides)` -> a fresh EmbeddedEngine."""
    from engine_adapter.embedded.config import EngineConfig
    from engine_adapter.embedded.engine import EmbeddedEngine

    def build(**overrides):
        return EmbeddedEngine(EngineConfig(**{**SMALL_ENGINE, **overrides}))

    return build


# ----- timeouts (pytest-timeout; pyproject's `timeout` for every other test) ----------------
# An e2e test's own bounds, summed at their worst: a package server's and a module server's
# start (SGLangServer.start, 420 s each, both charged to the first test that uses them),
# the longest body (test_e2e_twin's 600 s replay --against; test_e2e_plugin's recording:
# 300 + 300 s) and two stops (SandboxServer.stop, 60 s each): 1560 s. A test marked
# @pytest.mark.timeout keeps its own value.
E2E_TIMEOUT_S = 1800


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


# ----- CI: nothing skips but the gpu tests ----------------------------------------------
# Locally, a test that needs prometheus, promtool, tmux, shellcheck, SGLang's server imports
# or torch skips when it is absent. In CI (CI=true, set by GitHub Actions and .ci/run)
# `make setup` and .ci/run install all of them, so any such skip would hide a broken setup:
# under CI=true every skip is a failure, whatever its reason says, except a test marked
# `gpu` (CI has no CUDA). Skips at collection (a module-level importorskip) count too.
ALLOWED_IN_CI_MARKER = "gpu"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def ci_failure_for_skip(reason: str, *, gpu: bool = False) -> str | None:
    """The failure message for a skip that CI must not accept, or None to keep the skip."""
    if in_ci() and not gpu:
        return (f"CI=true: only tests marked {ALLOWED_IN_CI_MARKER!r} may skip in CI, "
                f"and this one skipped: {reason}")
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        gpu = item.get_closest_marker(ALLOWED_IN_CI_MARKER) is not None
        message = ci_failure_for_skip(str(report.longrepr[2]), gpu=gpu)
        if message is not None:
            report.outcome = "failed"
            report.longrepr = message


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped while it is imported (`pytest.importorskip` at module level)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        message = ci_failure_for_skip(str(report.longrepr[2]))
        if message is not None:
            report.outcome = "failed"
            report.longrepr = message


@pytest.fixture(scope="session")
def loopback_demo_url() -> str:
    """The URL of SGLang's loopback stand-in, in a process of its own (tests/remote_relay.py);
    one per session (it imports SGLang: seconds)."""
    pytest.importorskip("torch")
    pytest.importorskip("sglang")
    from remote_relay import DemoProcess

    with DemoProcess() as demo:
        yield demo.url


# ----- exit: the status pytest computed, without the interpreter's native teardown ---------
# A full run imports torch, SGLang's Rust tree core, Ray and ZMQ into one process; in CI one
# such run crashed with SIGSEGV in interpreter teardown *after* pytest had printed
# "1269 passed", turning a green suite into a failed `make test`. Every result is reported by
# then, so the session ends with os._exit(pytest's own exit status) once the terminal summary
# and every other plugin's unconfigure have run (trylast). The status is read from the
# session at that point, not from the sessionfinish hook's argument: a plugin may still
# change it in its own sessionfinish (syrupy's unused snapshots, a `pytest.exit()` there).
# Set KVCTL_TEST_NATIVE_EXIT=1 to keep the normal teardown (to chase the crash itself).
_SESSION: list[pytest.Session] = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _SESSION.append(session)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if _SESSION and os.environ.get("KVCTL_TEST_NATIVE_EXIT") != "1":
        status = int(_SESSION[-1].exitstatus)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

"""In CI (CI=true) a skip is a failure, whatever its reason, unless the test is marked `gpu`;
and the session's exit code is pytest's final exit status.

The rules live in tests/conftest.py (pytest hooks); these tests run a real pytest session
in a subprocess on a scratch folder holding a copy of that conftest and test files that
skip the way the suite's tests do (at run time and at collection), and check the summary
and the process's return code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SKIPPING = '''
import pytest

def test_needs_tmux():
    pytest.skip("tmux not installed")

def test_needs_sglang():
    pytest.importorskip("sglang.no_such_submodule")

def test_needs_shellcheck():
    pytest.skip("shellcheck not installed")

def test_needs_the_server_imports():
    pytest.skip("SGLang server imports missing (uvicorn): make setup installs it")

def test_needs_a_feature():
    pytest.skip("kvctl inspect has no --plugin-url yet")

@pytest.mark.gpu
def test_needs_cuda():
    pytest.skip("needs CUDA")
'''
SKIPPED_AT_COLLECTION = '''
import pytest

pytest.importorskip("no_such_package_for_kvctl")

def test_never_collected():
    pass
'''
# A plugin that changes the exit status in its own sessionfinish, as syrupy does for unused
# snapshots: the process must exit with that status, not with the hook argument's.
LATE_STATUS = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    session.exitstatus = 3
'''


def run_session(tmp_path: Path, ci: str, *, collection_skip: bool = False,
                late_status: bool = False) -> subprocess.CompletedProcess:
    """Run pytest on a copy of the suite's conftest plus the scratch files."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(SKIPPING)
    if collection_skip:
        (tmp_path / "test_whole_module.py").write_text(SKIPPED_AT_COLLECTION)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs"]
    env = {**os.environ, "CI": ci}
    env.pop("KVCTL_TEST_NATIVE_EXIT", None)
    if late_status:
        (tmp_path / "late_status.py").write_text(LATE_STATUS)
        args += ["-p", "late_status"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path),
                                                          env.get("PYTHONPATH")]))
    return subprocess.run([*args, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_ci_turns_every_non_gpu_skip_into_a_failure(tmp_path):
    """CI=true: the tmux, SGLang, shellcheck, server-imports and missing-feature skips fail
    with their reasons and the session exits 1; the gpu-marked skip stays a skip."""
    done = run_session(tmp_path, "true")
    assert "5 failed, 1 skipped" in done.stdout, done.stdout
    assert done.stdout.count("only tests marked 'gpu' may skip in CI") == 5
    for reason in ("tmux not installed", "shellcheck not installed", "no --plugin-url yet",
                   "SGLang server imports missing", "sglang.no_such_submodule"):
        assert reason in done.stdout
    assert done.returncode == 1


def test_ci_fails_a_module_skipped_at_collection(tmp_path):
    """CI=true: a module-level importorskip is a collection error, not a silent skip."""
    done = run_session(tmp_path, "true", collection_skip=True)
    assert "1 error" in done.stdout and "no_such_package_for_kvctl" in done.stdout, done.stdout
    assert done.returncode == 2  # pytest stops at a collection error: "Interrupted"


def test_outside_ci_a_missing_tool_skips(tmp_path):
    """CI unset: all six skip, the whole module too, nothing fails, the session exits 0."""
    done = run_session(tmp_path, "", collection_skip=True)
    assert "7 skipped" in done.stdout, done.stdout
    assert done.returncode == 0


def test_the_exit_code_is_the_final_session_status(tmp_path):
    """A plugin that sets session.exitstatus = 3 in its own sessionfinish: the process exits
    3 (os._exit reads the session, not the hook argument's earlier 0)."""
    done = run_session(tmp_path, "", late_status=True)
    assert "6 skipped" in done.stdout, done.stdout
    assert done.returncode == 3

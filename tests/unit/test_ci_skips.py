"""In CI (CI=true) a missing prometheus, promtool, tmux or SGLang fails instead of skipping.

The rule lives in tests/conftest.py (a pytest hook); these tests run a real pytest session
in a subprocess on a scratch test file that skips the way the suite's tests do.
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

def test_needs_cuda():
    pytest.skip("needs CUDA")
'''


def run_session(tmp_path: Path, ci: str) -> str:
    """Run pytest on a copy of the suite's conftest plus SKIPPING; return its summary."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(SKIPPING)
    env = {**os.environ, "CI": ci}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rfs", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.stdout


def test_ci_turns_a_missing_tool_into_a_failure(tmp_path):
    """CI=true: the tmux and SGLang skips fail with the reason; the CUDA skip stays a skip."""
    summary = run_session(tmp_path, "true")
    assert "2 failed, 1 skipped" in summary, summary
    assert "CI=true: a tool the suite needs is missing" in summary


def test_outside_ci_a_missing_tool_skips(tmp_path):
    """CI unset: all three skip, nothing fails."""
    assert "3 skipped" in run_session(tmp_path, ""), run_session(tmp_path, "")

"""`kvctl plan recommend` stays fast: without --validate-with-replay it imports no engine.

Runs in a fresh interpreter under `python -X importtime` and reads the import log (stderr
lines `import time: self | cumulative | package`), so any transitive import counts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sglang")


def imported(*argv: str) -> tuple[int, set[str]]:
    """Exit code and the modules imported while running `python -X importtime *argv`."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    return proc.returncode, modules


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_recommend_help_imports_neither_torch_nor_sglang():
    """`kvctl plan recommend --help` (which lists --validate-with-replay) loads no torch/sglang."""
    code, modules = imported("-m", "kvctl", "plan", "recommend", "--help")
    assert code == 0
    assert "kvctl.cli.plan_recommend" in modules
    assert heavy(modules) == []


def test_recommend_without_the_flag_never_loads_the_replay():
    """A full recommendation (--json) imports neither the replay validation nor torch/sglang."""
    code, modules = imported("-m", "kvctl", "plan", "recommend", "--model", "Llama-3-8B",
                             "--gpu", "H100-SXM", "--context", "4000", "--output", "200", "--json")
    assert code == 0
    assert "kvctl.replay.validate" not in modules
    assert heavy(modules) == []


def test_the_comparison_helper_is_pure():
    """kvctl.sizing.plan.validate imports no engine: no torch, no sglang, and of
    engine_adapter only its import-free base (errors and page arithmetic, which every layer
    shares: engine_adapter/base)."""
    code, modules = imported("-c", "import kvctl.sizing.plan.validate")
    assert code == 0
    assert "kvctl.sizing.plan.validate" in modules
    base = ("engine_adapter", "engine_adapter.base")
    assert sorted(m for m in modules if m.split(".")[0] in (*HEAVY, "engine_adapter")
                  and m not in base and not m.startswith("engine_adapter.base.")) == []

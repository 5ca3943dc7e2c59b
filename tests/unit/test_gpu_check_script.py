"""benchmarks/gpu_check.sh cannot run here (no GPU), so its plan is checked instead:
`--dry-run` executes nothing, exits 0 and prints every step with the launch line the issue
asks for; bad options exit 2; and the script is shellcheck-clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_dry_run_prints_the_whole_plan_and_runs_nothing(tmp_path):
    """Every step appears in order; the server runs the tiny dummy model with metrics, KV
    events and the plugin; nothing is created (the venv does not appear)."""
    venv = tmp_path / "venv-gpu"
    done = _run("--dry-run", "--venv", str(venv))
    assert done.returncode == 0, done.stderr
    plan = done.stdout + done.stderr
    steps = ["1. install", "2. SGLang server", "3. ledger", "4. embedded engine", "5. throughput"]
    positions = [plan.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), positions
    launch = next(line for line in plan.splitlines() if "KVCTL_SGLANG_PLUGIN=1" in line)
    for flag in ("-m sglang.launch_server", "--load-format dummy", "--skip-tokenizer-init",
                 "--enable-metrics", "--kv-events-config"):
        assert flag in launch, flag
    assert "install sglang==0.5.23" in plan and "--device cuda" in plan
    assert "gpu_check_load.py ledger" in plan and "test_engine_cuda.py" in plan
    assert not venv.exists()


@pytest.mark.parametrize("args", [("--bogus",), ("--port", "x"), ("--venv",)])
def test_bad_options_exit_2(args):
    """Unknown options and missing or malformed values are usage errors, one line."""
    done = _run(*args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (apt-get install shellcheck)")
def test_the_script_is_shellcheck_clean():
    """shellcheck finds nothing, infos included."""
    done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout

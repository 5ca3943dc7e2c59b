"""`--device` on a machine without CUDA (the CI machine): cuda is a one-line error with exit
2 before anything runs, auto falls back to cpu, and an engine configured for cuda refuses to
build with the same message. Each runs kvctl in a process with CUDA_VISIBLE_DEVICES="", so
torch sees no GPU there even on a GPU machine: nothing here skips (CI=true allows only the
gpu marker's skips)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "scenarios" / "coding-agents.yaml"


NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def kvctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvctl", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=300, env=NO_GPU)


@pytest.mark.parametrize("command", [
    ("replay", str(SCENARIO), "--limit", "2"),
    ("check", "--steps", "5"),
    ("monitor", "--json"),
    ("exporter", "--scenario", str(SCENARIO), "--duration", "1"),
])
def test_device_cuda_without_cuda_is_one_line_and_exit_2(command):
    """Every embedded-engine command refuses --device cuda up front, in one line."""
    done = kvctl(*command, "--device", "cuda")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvctl: error: --device cuda: "), lines
    assert lines[0].endswith("; use --device cpu or auto")


def test_device_auto_runs_on_the_cpu_and_says_so():
    """auto resolves to cpu here; the replay report records the device it ran on."""
    import json

    done = kvctl("replay", str(SCENARIO), "--limit", "2", "--device", "auto", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["settings"]["device"] == "cpu"


ENGINE_FOR_CUDA = """
from engine_adapter.embedded.config import EngineConfig
from engine_adapter.embedded.engine import EmbeddedEngine
from kvctl.errors import InputError
try:
    EmbeddedEngine(EngineConfig(pool_tokens=256, page_size=16, device="cuda"))
except InputError as exc:
    print(exc)
"""


def test_an_engine_configured_for_cuda_refuses_to_build():
    """EngineConfig(device='cuda') built directly (no CLI) raises InputError, not a CUDA
    traceback from SGLang's pools."""
    done = subprocess.run([sys.executable, "-c", ENGINE_FOR_CUDA], cwd=ROOT, text=True,
                          capture_output=True, timeout=300, env=NO_GPU)
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert message.startswith("--device cuda: ") and message.endswith("use --device cpu or auto")

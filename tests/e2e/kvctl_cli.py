"""TEST-ONLY: run the kvctl CLI as a separate process, as an operator does (`python -m kvctl`
from the repository root, so this checkout's code runs). Not a test module."""

from __future__ import annotations

import json
import subprocess
import sys

from e2e.sglang_server import ROOT


def kvctl(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvctl", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout_s)


def kvctl_json(*args: str) -> dict:
    done = kvctl(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def shared_prefix_prompts(prefix_tokens: int, suffix_tokens: int, count: int,
                          base: int = 100) -> list[list[int]]:
    """`count` prompts: one shared prefix, then a suffix of distinct ids per prompt."""
    prefix = list(range(base, base + prefix_tokens))
    return [prefix + [base + prefix_tokens + i * suffix_tokens + j for j in range(suffix_tokens)]
            for i in range(count)]

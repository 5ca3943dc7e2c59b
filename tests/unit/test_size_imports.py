"""`kvctl size` stays pure: neither --help nor a sizing run imports torch or sglang.

Runs the CLI in a fresh interpreter under `python -X importtime` and reads the import log
(stderr lines `import time: self | cumulative | package`), so any transitive import counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from import_log import imported_modules

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("torch", "sglang")


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in FORBIDDEN)


def test_size_help_imports_neither_torch_nor_sglang():
    """`kvctl size --help` loads no torch/sglang module."""
    code, modules = imported_modules("size", "--help")
    assert code == 0
    assert heavy(modules) == []


def test_size_run_imports_neither_torch_nor_sglang():
    """A full sizing run with a config directory and --json loads no torch/sglang module."""
    code, modules = imported_modules(
        "size", "--model", str(REPO / "tests/fixtures/configs/deepseek-v3"), "--gpu", "H200",
        "--gpus", "8", "--tp", "8", "--context", "8192,32768", "--json",
    )
    assert code == 0
    assert "kvctl.sizing.size_report" in modules
    assert heavy(modules) == []

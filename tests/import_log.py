"""Which modules a `python -m kvctl ...` run imports, read from `python -X importtime`.

The import log (stderr lines `import time: self | cumulative | package`) names every module
the fresh interpreter loads, transitive imports included.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def imported_modules(*args: str) -> tuple[int, set[str]]:
    """Exit code and the set of modules imported while running `python -m kvctl *args`."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kvctl", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "kvctl.cli.app" in modules, proc.stderr[-2000:]
    return proc.returncode, modules

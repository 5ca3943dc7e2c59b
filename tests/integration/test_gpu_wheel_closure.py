"""The GPU check's wheel set covers what the check imports (issue 27 item 1), without network.

benchmarks/gpu/import_closure.py imports, in a fresh interpreter of this venv, SGLang's server
and model-runner modules, kvctl's CLI, the embedded engine, the plugin and the load probe, and
names the distributions they came from. Each must be on the lent image's list
(benchmarks/gpu/image-names.txt) or in the set (benchmarks/gpu/wheels.txt): dropping a needed
wheel fails here. The install proof under Python 3.12 is `benchmarks/gpu_wheels.sh --prove`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.wheel_set import (  # noqa: E402
    IMAGE_NAMES,
    WHEELS,
    read_names,
    read_pins,
    uncovered,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_everything_the_gpu_check_imports_is_on_the_image_or_in_the_set():
    """The check's import closure, measured in a fresh interpreter of this venv (SGLang's
    server and model-runner modules, kvctl's CLI, the embedded engine, the plugin, the load
    probe), maps only to distributions on the image's list or in wheels.txt."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "import_closure.py"),
                           "--json"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    closure = json.loads(done.stdout)
    assert "sglang" in closure and "torch" in closure
    assert uncovered(closure, read_pins(WHEELS), read_names(IMAGE_NAMES)) == []
    # the proof's stand-in for the image (gpu_wheels.sh --prove) must hold them too: it once
    # lacked numba (the what-if shadow's, imported at the plugin's attach), and the plugin
    # did not attach in the proof's server
    stand_in = set(read_pins(ROOT / "benchmarks" / "gpu" / "image-packages.txt"))
    assert uncovered(closure, read_pins(WHEELS), stand_in) == []

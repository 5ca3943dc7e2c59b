"""benchmarks/gpu_check.sh cannot run here (no GPU), so its plan is checked instead:
`--dry-run` executes nothing, exits 0 and prints every step with its expected and maximum
seconds, within a device call's 600 s and the 900 s of device time a lent task gets; bad
options exit 2; the scripts are shellcheck-clean; and the report builder
(benchmarks/gpu/check_report.py) records what the steps left, a missing figure as null."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.check_report import build  # noqa: E402

STEPS = ["env", "install", "probe", "replay", "check", "rust-core", "gputests", "server-on",
         "ledger", "hits", "inspect", "load-on", "server-off", "load-off"]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**__import__("os").environ, **env})


def test_dry_run_prints_every_step_with_seconds_within_the_device_budget(tmp_path):
    """The 14 steps in order, each with expected <= cap seconds; the expected total is their
    sum, fits the 540 s budget, and with the machine's start fits 900 s; nothing is made."""
    out = tmp_path / "out"
    done = _run("--offline", "--dry-run", OUT=str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines[1:15]]
    assert [r[0] for r in rows] == STEPS
    expected = [int(r[1]) for r in rows]
    assert all(int(r[1]) <= int(r[2]) for r in rows)
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[1] == str(sum(expected)) == "405"
    assert sum(expected) <= 540 and "= 525 s of the 900 s of device time" in total
    assert "dry run: nothing was executed" in done.stdout and not out.exists()


@pytest.mark.parametrize("args", [("--bogus",), ("--port", "x"), ("--wheels",),
                                  ("--budget", "soon")])
def test_bad_options_exit_2(args):
    """Unknown options and missing or malformed values are usage errors, one line."""
    done = _run(*args)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None,
                    reason="shellcheck not installed (apt-get install shellcheck)")
@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_wheels.sh"])
def test_the_scripts_are_shellcheck_clean(script):
    """shellcheck finds nothing, infos included."""
    done = subprocess.run(["shellcheck", str(ROOT / "benchmarks" / script)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout


def test_an_informational_step_does_not_decide_the_verdict(tmp_path):
    """Every planned step passed but rust-core (informational) failed: the check passed."""
    rows = [f"{name}\t{'FAIL' if name == 'rust-core' else 'PASS'}\t1\t1\t9\texit 0\n"
            for name in STEPS]
    (tmp_path / "steps.tsv").write_text("".join(rows))
    assert build(tmp_path, budget=540, seconds=14)["passed"] is True


def test_report_keeps_figures_marks_unrun_steps_and_missing_outputs_null(tmp_path):
    """Two steps ran (one failed); the rest are NOT RUN; the loads give the time ratio
    on/off = off tokens/s over on tokens/s; an output no step wrote is null, not zero."""
    (tmp_path / "steps.tsv").write_text("env\tPASS\t3\t5\t30\texit 0\n"
                                        "install\tFAIL\t9\t15\t90\texit 1\n")
    (tmp_path / "load-on.json").write_text(json.dumps({"output_tokens_per_s": 900.0}))
    (tmp_path / "load-off.json").write_text(json.dumps({"output_tokens_per_s": 990.0}))
    report = build(tmp_path, budget=540, seconds=12)
    assert [(s["step"], s["status"]) for s in report["steps"]][:3] == [
        ("env", "PASS"), ("install", "FAIL"), ("probe", "NOT RUN")]
    assert len(report["steps"]) == 14 and report["passed"] is False
    assert report["overhead"] == {"tokens_per_s_on": 900.0, "tokens_per_s_off": 990.0,
                                  "time_ratio_on_over_off": 1.1}
    assert report["hits"] is None and report["ledger"] == {"reads": [], "summary": None}

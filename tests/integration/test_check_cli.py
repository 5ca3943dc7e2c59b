"""`kvctl check`: the shipped lifecycle scenario on SGLang's real cache, checked after every
step, and each injected fault caught (exit 1, named) or rolled back (exit 0).

The clean run and the faults go through Typer's CliRunner on `kvctl.cli.app.app`; one test
runs the installed console script in a subprocess, where stdout is a real file descriptor
(SGLang's Rust tree core prints to fd 1 directly, which CliRunner cannot see).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

KVCTL = Path(sys.executable).with_name("kvctl")
JSON_FIELDS = ("steps", "requests_finished", "pool_residual_max_tokens", "delta_ref_max",
               "funnel_monotone", "violations")


def _check(*args: str):
    return CliRunner().invoke(app, ["check", *args])


SHIPPED = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "lifecycle-check.yaml"


@pytest.fixture(scope="module")
def pressured(tmp_path_factory):
    """The shipped scenario as a pressured server would run it. SGLang's PrefillAdder
    reserves each running request's remaining outputs (up to
    SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, 4,096, which these outputs never reach) and the
    scenario's tau_high 0.97 caps admission below the pool, so as shipped decode never runs
    out and never retracts. The clean runs drop tau_high (off by default) and run the
    estimate at 4, as a server started with that variable would: admission is optimistic
    and decode retracts. Yields the scenario path to pass with --scenario."""
    import yaml
    from sglang.srt.managers import schedule_policy

    doc = yaml.safe_load(SHIPPED.read_text())
    doc["engine"].pop("tau_high", None)
    path = tmp_path_factory.mktemp("scenario") / "lifecycle-check.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schedule_policy, "CLIP_MAX_NEW_TOKENS", 4)
        yield str(path)


@pytest.fixture(scope="module")
def clean(sglang_ready, pressured):
    """The full shipped scenario, once per module (its runs are deterministic)."""
    result = _check("--scenario", pressured, "--json")
    return result, json.loads(result.stdout)


def test_clean_run_of_the_shipped_scenario_exits_0(clean):
    """Every step of lifecycle-check.yaml passes: exit 0, residual 0, delta_ref 0,
    monotone funnel, no violation, and the run really evicted and retracted."""
    result, data = clean
    assert result.exit_code == 0, result.output
    assert all(field in data for field in JSON_FIELDS)
    assert data["ok"] is True and data["violations"] == []
    assert (data["pool_residual_max_tokens"], data["delta_ref_max"]) == (0, 0)
    assert data["funnel_monotone"] is True
    assert data["steps"] > 1_000 and data["requests_finished"] > 50
    assert data["evictions"] > 0 and data["retractions"] > 0
    assert data["fault"] is None and data["scenario"] == "lifecycle-check"


def test_clean_run_is_deterministic(clean, sglang_ready, pressured):
    """The same scenario and seed give the same steps, requests and hit rate."""
    _, first = clean
    again = json.loads(_check("--scenario", pressured, "--json").stdout)
    for field in ("steps", "requests_finished", "hit_rate", "evictions", "retractions"):
        assert again[field] == first[field], field


def test_leak_exits_1_naming_the_pool_ledger_residual(sglang_ready):
    """--inject-fault leak: exit 1; the violation names the ledger residual and its terms."""
    result = _check("--inject-fault", "leak", "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["fault"] == "leak"
    assert data["pool_residual_max_tokens"] == 16  # one page of the scenario's page size 16
    (violation,) = data["violations"]
    assert "pool ledger residual 16 tokens: pool 3072 != free" in violation
    assert violation.startswith("step ")


def test_lock_leak_exits_1_naming_delta_ref_and_the_node(sglang_ready):
    """--inject-fault lock-leak: exit 1; the violation names delta_ref, the node id, the
    recorded and derived counts, and the request whose lease explains the rest."""
    result = _check("--inject-fault", "lock-leak", "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["delta_ref_max"] == 1
    (violation,) = data["violations"]
    assert "delta_ref +1 at node " in violation
    assert "(recorded " in violation and "derived " in violation


def test_alloc_fail_exits_0_with_the_admission_rolled_back(sglang_ready):
    """--inject-fault alloc-fail: exit 0; fault_outcome says the admission rolled back with
    the state digest unchanged, and every check still passes."""
    result = _check("--inject-fault", "alloc-fail", "--steps", "150", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fault_outcome"] == "admission rolled back, state digest unchanged"
    assert data["violations"] == [] and data["steps"] == 150


def test_human_output_names_the_outcome(sglang_ready):
    """Without --json a table is printed and a final clean/violation line."""
    result = _check("--steps", "40")
    assert result.exit_code == 0, result.output
    assert "steps checked" in result.stdout and "clean:" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--scenario", "/nonexistent/scenario.yaml"),
         "kvctl: error: --scenario /nonexistent/scenario.yaml: no such file"),
        (("--inject-fault", "bitflip"),
         "kvctl: error: --inject-fault: unknown fault 'bitflip'; valid: leak, lock-leak, alloc-fail"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message):
    """A missing scenario file or an unknown fault: exit 2, exactly one line, no traceback."""
    result = _check(*args)
    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_invalid_scenario_field_exits_2_naming_the_field(tmp_path):
    """A scenario with max < min names the file and the field path on one line."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration_s: 1\nagents:\n  - name: a\n    sessions_per_s: 1\n"
                   "    context_tokens: 10\n    output_tokens: {min: 5, max: 2}\n")
    result = _check("--scenario", str(bad))
    assert result.exit_code == 2
    assert result.stderr.strip() == f"kvctl: error: {bad}: agents[0].output_tokens: max 2 < min 5"


def test_json_stdout_stays_parseable_when_an_allocation_fails(sglang_ready):
    """The installed script with --json prints exactly one JSON document on stdout even when
    SGLang's allocation-failure path prints its tree (Rust core, fd 1)."""
    run = subprocess.run(
        [str(KVCTL), "check", "--inject-fault", "alloc-fail", "--steps", "120", "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["fault_outcome"] == "admission rolled back, state digest unchanged"

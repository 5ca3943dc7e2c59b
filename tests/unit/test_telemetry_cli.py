"""`kvctl exporter` option handling: bad input is one line on stderr and exit code 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.unit


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text("name: x\n")
    return path


def _run(*args: str):
    return CliRunner().invoke(app, ["exporter", *args])


def test_help_names_the_options():
    """--help lists the workload, address and interval options."""
    result = _run("--help")
    assert result.exit_code == 0
    for option in ("--scenario", "--trace", "--host", "--port", "--interval", "--json"):
        assert option in result.output


def test_needs_a_workload():
    """Neither --scenario, --trace nor --url: exit 2 with one line."""
    result = _run()
    assert result.exit_code == 2
    assert result.stderr == ("kvctl: error: give exactly one of --scenario FILE, --trace FILE "
                             "or --url URL\n")


def test_scenario_and_trace_are_exclusive(workload):
    """Both at once: exit 2."""
    result = _run("--scenario", str(workload), "--trace", str(workload))
    assert result.exit_code == 2
    assert "exactly one of --scenario FILE, --trace FILE or --url URL" in result.stderr


def test_missing_file_is_an_input_error(tmp_path):
    """A workload file that does not exist: exit 2 naming it."""
    missing = tmp_path / "nope.yaml"
    result = _run("--scenario", str(missing))
    assert result.exit_code == 2
    assert result.stderr == f"kvctl: error: --scenario {missing}: no such file\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--port", "70000"), "--port must be at most 65,535, got 70000"),
        (("--interval", "0"), "--interval must be positive, got 0"),
        (("--duration", "-1"), "--duration must be positive, got -1"),
    ],
)
def test_out_of_range_numbers_are_input_errors(workload, args, message):
    """Port, interval and duration are checked before anything starts."""
    result = _run("--scenario", str(workload), *args)
    assert result.exit_code == 2
    assert result.stderr == f"kvctl: error: {message}\n"


def test_malformed_scenario_is_an_input_error(tmp_path):
    """A scenario that fails validation: exit 2 naming the file, before any engine starts."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration_s: 10\nagents: []\n")
    result = _run("--scenario", str(bad))
    assert result.exit_code == 2
    assert result.stderr.startswith("kvctl: error: ") and str(bad) in result.stderr
    assert result.stderr.count("\n") == 1

"""The CLI edge: one line and a documented exit code for every failure, --version, and the
shape of every --json document (schema_version, non-finite floats spelled out).

Commands run in-process through Typer's CliRunner on the real app. The "unexpected
exception" cases register a throw-away command on a private Typer app built with the same
KvctlGroup, so no product command has to be broken to test the guard.
"""

from __future__ import annotations

import json
import math

import pytest
import typer
from typer.testing import CliRunner

from kvctl import __version__
from kvctl.cli.app import DEBUG_HINT, KvctlGroup, app
from kvctl.cli.output import SCHEMA_VERSION, to_jsonable, versioned
from kvctl.cli.validate import validate_commands

pytestmark = pytest.mark.unit


def broken_app() -> typer.Typer:
    """A KvctlGroup app whose `boom` command raises a plain ZeroDivisionError (a bug)."""
    private = typer.Typer(cls=KvctlGroup, pretty_exceptions_enable=False, add_completion=False)

    @private.command("boom")
    def boom(pages: int = 1) -> None:
        print(1 // (pages - pages))

    @private.command("other")
    def other() -> None:
        raise OSError(13, "Permission denied", "/nowhere/report.json")

    validate_commands(private)
    return private


def test_unexpected_exception_is_one_line_exit_1_with_the_debug_hint(monkeypatch):
    """A bug surfaces as one line naming the exception, exit 1, and the KVCTL_DEBUG hint."""
    monkeypatch.delenv("KVCTL_DEBUG", raising=False)
    result = CliRunner().invoke(broken_app(), ["boom"])
    assert result.exit_code == 1
    assert result.stderr == ("kvctl: error: internal error: ZeroDivisionError: integer division "
                             f"or modulo by zero ({DEBUG_HINT})\n")


def test_kvctl_debug_shows_the_traceback(monkeypatch):
    """KVCTL_DEBUG=1: the traceback is printed before the same one-line error."""
    monkeypatch.setenv("KVCTL_DEBUG", "1")
    result = CliRunner().invoke(broken_app(), ["boom"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError" in result.stderr and result.stderr.endswith(f"({DEBUG_HINT})\n")


def test_os_error_is_one_line_naming_the_file():
    """An OSError (a file the command touched) is one line with the path, exit 1."""
    result = CliRunner().invoke(broken_app(), ["other"])
    assert (result.exit_code, result.stderr) == (
        1, "kvctl: error: /nowhere/report.json: Permission denied\n")


def test_the_shared_layer_guards_a_new_command_too():
    """validate_commands covers any command: --pages -1 is refused before the body runs."""
    result = CliRunner().invoke(broken_app(), ["boom", "--pages", "-1"])
    assert (result.exit_code, result.stderr) == (2, "kvctl: error: --pages must not be "
                                                    "negative, got -1\n")


def test_missing_required_option_is_one_line_exit_2():
    """`kvctl size` without --model: one line (no Rich box), exit 2."""
    result = CliRunner().invoke(app, ["size"])
    assert result.exit_code == 2
    assert result.stderr == ("kvctl: error: Missing option '--model' / '-m'. "
                             "(see kvctl size --help)\n")


def test_unparseable_number_is_one_line_exit_2():
    """`--seed abc` (Typer's own parse error) is one line, exit 2."""
    result = CliRunner().invoke(app, ["replay", "x.jsonl", "--seed", "abc"])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("kvctl: error: Invalid value for '--seed'")


def test_version():
    """`kvctl --version` prints the package version and exits 0."""
    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"kvctl {__version__}\n")


def test_json_documents_carry_schema_version_first():
    """A --json document gets schema_version as its first key; one that has it keeps it."""
    assert list(versioned({"a": 1})) == ["schema_version", "a"]
    assert versioned({"a": 1})["schema_version"] == SCHEMA_VERSION == 1
    assert versioned({"schema_version": 7}) == {"schema_version": 7}


def test_non_finite_floats_are_spelled_out_not_null():
    """NaN and infinities become "NaN" / "Infinity" / "-Infinity"; None stays null."""
    data = {"nan": math.nan, "up": math.inf, "down": -math.inf, "unknown": None, "x": 0.5}
    assert json.loads(json.dumps(to_jsonable(data), allow_nan=False)) == {
        "nan": "NaN", "up": "Infinity", "down": "-Infinity", "unknown": None, "x": 0.5}


def test_size_json_has_schema_version():
    """A real command's --json output carries schema_version."""
    result = CliRunner().invoke(app, ["size", "--model", "Llama-3-8B", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["schema_version"] == 1

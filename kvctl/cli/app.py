"""Root Typer application: wires one module per command and converts errors once.

Every command module under `kvctl.cli` only parses options and calls into `kvctl.sizing`,
`kvctl.replay`, `engine_adapter` or `telemetry`. Those raise `KvctlError`; `KvctlGroup`
turns it into one line on stderr and exit code 2 (input) or 1 (runtime), never a traceback.
The same edge guards everything else:

    usage error (Click/Typer: missing option, bad int)  -> one line, exit 2
    option out of range (kvctl.cli.validate)            -> one line, exit 2
    OSError (a file or socket the command touched)      -> one line, exit 1
    any other exception (a bug)                          -> one line + KVCTL_DEBUG hint, exit 1

`KVCTL_DEBUG=1` prints the traceback of that last kind instead of hiding it. Heavy imports
(torch, sglang) happen inside command bodies so that `kvctl size --help` stays fast.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer._click import exceptions as click_errors  # Typer 0.29 vendors Click here
from typer.core import TyperGroup

from kvctl import __version__
from kvctl.cli.validate import validate_commands
from kvctl.errors import KvctlError

DEBUG_HINT = "rerun with KVCTL_DEBUG=1 for the traceback"


def _one_line(text: str) -> str:
    """Collapse a message onto one line (a multi-line exception text stays readable)."""
    return " ".join(str(text).split())


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"kvctl: error: {_one_line(message)}", err=True)
    return typer.Exit(code=code)


class KvctlGroup(TyperGroup):
    """A Typer group whose every failure is one line on stderr and a documented exit code."""

    def invoke(self, ctx):  # noqa: D102 - behaviour in the class docstring
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, click_errors.ClickException):
            raise  # usage errors are formatted in main(), exits pass through
        except KvctlError as err:
            raise _fail(str(err), err.exit_code) from None
        except OSError as err:
            where = f"{err.filename}: " if getattr(err, "filename", None) else ""
            raise _fail(f"{where}{err.strerror or err}", 1) from None
        except Exception as err:  # noqa: BLE001 - the last line of defence, see docstring
            if os.environ.get("KVCTL_DEBUG") == "1":
                traceback.print_exc()
            raise _fail(f"internal error: {type(err).__name__}: {err} ({DEBUG_HINT})", 1) from None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        """Run without Typer's standalone handling so that a usage error is one line."""
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as err:  # `kvctl` alone: help already printed
            code = err.exit_code
        except click_errors.ClickException as err:
            ctx = getattr(err, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            typer.echo(f"kvctl: error: {_one_line(err.format_message())}{hint}", err=True)
            code = err.exit_code
        except typer.Abort:
            typer.echo("kvctl: error: aborted", err=True)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)  # keep registration order in --help


app = typer.Typer(
    name="kvctl",
    cls=KvctlGroup,
    help="Size, plan, replay and watch the KV cache of an LLM serving engine (SGLang).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kvctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print kvctl's version and exit.")] = False) -> None:
    """Size, plan, replay and watch the KV cache of an LLM serving engine (SGLang)."""


def _register() -> None:
    """Wire every command module. Each imports only what its --help needs (no torch or
    SGLang: tests/unit/test_size_imports.py). Every command's options then pass through
    kvctl.cli.validate before its body runs."""
    import importlib

    for module_name, attr, name, kind in _COMMANDS:
        module = importlib.import_module(f"kvctl.cli.{module_name}")
        target = getattr(module, attr)
        if kind == "group":
            app.add_typer(target, name=name)
        else:
            app.command(name, help=(module.__doc__ or "").splitlines()[0])(target)
    validate_commands(app)


# (module, attribute, command name, "command" | "group"), in --help order.
_COMMANDS: list[tuple[str, str, str, str]] = [
    ("size", "size_command", "size", "command"),
    ("plan", "plan_app", "plan", "group"),
    ("addr", "addr_command", "addr", "command"),
    ("replay", "replay_command", "replay", "command"),
    ("record", "record_command", "record", "command"),
    ("calibrate", "calibrate_command", "calibrate", "command"),
    ("check", "check_command", "check", "command"),
    ("inspect", "inspect_command", "inspect", "command"),
    ("monitor", "monitor_command", "monitor", "command"),
    ("exporter", "exporter_command", "exporter", "command"),
    ("explain", "explain_command", "explain", "command"),
    ("sandbox", "sandbox_command", "sandbox", "command"),
]

_register()


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KvctlError as err:  # raised outside a command (e.g. while wiring)
        print(f"kvctl: error: {_one_line(str(err))}", file=sys.stderr)
        sys.exit(err.exit_code)

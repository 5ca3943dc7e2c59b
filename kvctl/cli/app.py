"""Root Typer application: wires one module per command and converts errors once.

Every command module under `kvctl.cli` only parses options and calls into `kvctl.sizing`,
`kvctl.replay`, `engine_adapter` or `telemetry`. Those raise `KvctlError`; `KvctlGroup`
turns it into one line on stderr and exit code 2 (input) or 1 (runtime), never a traceback.
Heavy imports (torch, sglang) happen inside command bodies so that `kvctl size --help`
stays fast.
"""

from __future__ import annotations

import sys

import click
import typer
from typer.core import TyperGroup

from kvctl.errors import KvctlError


class KvctlGroup(TyperGroup):
    """A Typer group that reports `KvctlError` as one line and exits with its code."""

    def invoke(self, ctx: click.Context):  # noqa: D102 - behaviour in the class docstring
        try:
            return super().invoke(ctx)
        except KvctlError as err:
            click.echo(f"kvctl: error: {err}", err=True)
            raise typer.Exit(code=err.exit_code) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
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


def _register() -> None:
    """Wire every command module. Each imports only what its --help needs (no torch or
    SGLang: tests/unit/test_size_imports.py)."""
    import importlib

    for module_name, attr, name, kind in _COMMANDS:
        module = importlib.import_module(f"kvctl.cli.{module_name}")
        target = getattr(module, attr)
        if kind == "group":
            app.add_typer(target, name=name)
        else:
            app.command(name, help=(module.__doc__ or "").splitlines()[0])(target)


# (module, attribute, command name, "command" | "group"), in --help order.
_COMMANDS: list[tuple[str, str, str, str]] = [
    ("size", "size_command", "size", "command"),
    ("plan", "plan_app", "plan", "group"),
    ("addr", "addr_command", "addr", "command"),
    ("replay", "replay_command", "replay", "command"),
    ("check", "check_command", "check", "command"),
    ("inspect", "inspect_command", "inspect", "command"),
    ("monitor", "monitor_command", "monitor", "command"),
    ("exporter", "exporter_command", "exporter", "command"),
    ("explain", "explain_command", "explain", "command"),
]

_register()


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KvctlError as err:  # raised outside a command (e.g. while wiring)
        print(f"kvctl: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)

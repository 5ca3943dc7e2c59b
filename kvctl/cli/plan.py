"""Plan a deployment: capacity, retention, block size, COW, VMM, shared prefixes, flags.

Each sub-command parses options, calls one pure calculator in `kvctl.sizing.plan`, and
prints a Rich table with a "why" line per recommendation, or `--json`. Errors from the
calculators are `KvctlError`s; the root group turns them into one line and exit code 2.
"""

from __future__ import annotations

import click
import typer
from typer.core import TyperGroup

from kvctl.cli import (
    plan_blocks,
    plan_capacity,
    plan_chunked,
    plan_ledgers,
    plan_recommend,
    plan_retention,
)


class _OrderedGroup(TyperGroup):
    """Keeps sub-commands in registration order in --help."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


plan_app = typer.Typer(
    cls=_OrderedGroup,
    help="Plan a deployment: capacity, retention, block size, COW, VMM, shared prefixes, flags.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for _name, _function in (
    ("capacity", plan_capacity.capacity_command),
    ("retention", plan_retention.retention_command),
    ("chunked-prefill", plan_chunked.chunked_prefill_command),
    ("block-size", plan_blocks.block_size_command),
    ("cow", plan_blocks.cow_command),
    ("vmm", plan_ledgers.vmm_command),
    ("shared-prefix", plan_ledgers.shared_prefix_command),
    ("recommend", plan_recommend.recommend_command),
):
    plan_app.command(_name)(_function)

"""Run a scenario on the embedded engine and verify integrity after every step.

Exit 0 when every check passed, 1 on any violation (the step, the numbers, the node or
request), 2 on bad input.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.cli.device_option import DeviceOption, resolve_device_option
from kvctl.cli.output import console, print_json, to_jsonable



def check_command(
    scenario: Annotated[Optional[str], typer.Option(
        "--scenario", help="Scenario YAML to run (default: the shipped lifecycle-check.yaml).")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Stop after this many engine steps.")] = None,
    tree_core: Annotated[str, typer.Option("--tree-core", help="SGLang tree core: rust or python.")] = "rust",
    eviction: Annotated[Optional[str], typer.Option(help="Eviction policy (default: the scenario's).")] = None,
    inject_fault: Annotated[Optional[str], typer.Option(
        "--inject-fault", help="Test-only: break the engine once (leak, lock-leak, alloc-fail).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    device: DeviceOption = None,
) -> None:
    resolved_device = resolve_device_option(device)
    from kvctl.replay.check import run_check
    from kvctl.replay.scenario import SHIPPED_DIR

    scenario = scenario or str(SHIPPED_DIR / "lifecycle-check.yaml")
    result = run_check(scenario, steps=steps, tree_core=tree_core, eviction=eviction, inject=inject_fault,
                       device=resolved_device)
    if as_json:
        data = to_jsonable(result)
        data["ok"] = result.ok
        print_json(data)
    else:
        _render(result)
    raise typer.Exit(code=0 if result.ok else 1)


def _render(result) -> None:
    from kvctl.cli.fit_table import FitTable
    from kvctl.cli.glossary_terms import FOOTER

    out = console()
    table = FitTable(title=f"kvctl check: {result.scenario}, {result.tree_core} core, {result.eviction_policy}")
    table.add_column("check")
    table.add_column("result", justify="right")
    rate = "—" if result.hit_rate is None else f"{100 * result.hit_rate:.1f}%"
    rows = [
        ("steps checked", f"{result.steps:,}"),
        ("requests finished", f"{result.requests_finished:,}"),
        ("max |pool ledger residual| (tokens)", f"{result.pool_residual_max_tokens:,}"),
        ("max |delta_ref|", f"{result.delta_ref_max:,}"),
        ("funnel monotone", "yes" if result.funnel_monotone else "NO"),
        ("evictions / retractions", f"{result.evictions:,} / {result.retractions:,}"),
        ("token hit rate H_prefix", rate),
    ]
    if result.fault:
        rows.append(("injected fault", result.fault))
        if result.fault_outcome:
            rows.append(("fault outcome", result.fault_outcome))
    for row in rows:
        table.add_row(*row)
    out.print(table)
    if result.violations:
        for violation in result.violations:
            out.print(f"[red]violation:[/red] {violation}")
    else:
        out.print("[green]clean:[/green] every integrity check passed after every step")
    out.print(f"[dim]{FOOTER}[/dim]")

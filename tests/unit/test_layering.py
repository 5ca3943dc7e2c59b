"""Layering (DESIGN.md: cli -> tui / telemetry / replay -> engine_adapter / sizing -> base):
no import runs back up. Read from the source with `ast`, lazy imports inside functions
included, so a new arrow fails here the day it is written."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every absolute module a file imports (`from a.b import c` gives a.b and a.b.c)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _offenders(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return [f"{path.relative_to(REPO)} imports {name}"
            for package in packages for path in _files(package)
            for name in sorted(_imports(path))
            if name.split(".")[0] in forbidden]


def test_engine_adapter_and_telemetry_never_import_kvctl():
    """kvctl holds the CLI: engine_adapter and telemetry take errors and page arithmetic
    from engine_adapter/base, never from kvctl."""
    assert _offenders(("engine_adapter", "telemetry"), ("kvctl",)) == []


def test_the_base_imports_nothing_of_the_project():
    """engine_adapter/base sits below every layer: no kvctl, telemetry or other
    engine_adapter module."""
    names = {name for path in _files("engine_adapter/base") for name in _imports(path)}
    assert sorted(n for n in names if n.split(".")[0] in ("kvctl", "telemetry")
                  or (n.startswith("engine_adapter") and not n.startswith("engine_adapter.base"))
                  ) == []


def test_kvctl_reexports_the_same_error_classes():
    """`except KvctlError` at the CLI edge catches what an engine raises: one class each."""
    import engine_adapter.base.errors as base
    import kvctl.errors as reexported

    assert (reexported.KvctlError, reexported.InputError, reexported.RuntimeFailure,
            reexported.IntegrityError) == (base.KvctlError, base.InputError,
                                           base.RuntimeFailure, base.IntegrityError)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_engine_adapter_has_no_import_cycle():
    """No two engine_adapter modules import each other, directly or around a loop (the
    plugin's attach.py and hooks.py did: RUNTIME_ATTR now lives in settings.py)."""
    modules = {_module(path) for path in _files("engine_adapter")}
    graph = {_module(path): {name for name in _imports(path) if name in modules}
             for path in _files("engine_adapter")}
    assert _cycles(graph) == []


def _graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports, at module level or inside a function
    (`from a import b` counts as importing the package a, and a.b when b is a module)."""
    paths = [path for package in packages for path in _files(package)]
    modules = {_module(path) for path in paths}
    return {_module(path): {name for name in _imports(path) if name in modules}
            - {_module(path)} for path in paths}


def test_kvctl_and_telemetry_have_no_import_cycle():
    """No loop among kvctl (kvctl/cli included) and telemetry modules, lazy imports
    included (an import inside a function only to dodge a loop still counts): replay.py,
    replay_curve.py and twin.py shared the progress bar through replay.py (now
    replay_common.py); metrics_table.py and whatif_metrics.py the MetricSpec (now
    metric_spec.py)."""
    assert _cycles(_graph(("kvctl", "telemetry"))) == []


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a two-module and a three-module loop are both reported."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}) \
        == [["a", "b"], ["c", "d", "e"]]

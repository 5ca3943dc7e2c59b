"""Rendering at the CLI edge: JSON for scripts, Rich tables for people.

Commands build a plain dict (the `--json` document) and, for people, a Rich renderable.
Nothing below `kvctl.cli` prints. Every `--json` document carries `schema_version`; a
non-finite float is spelled "NaN" / "Infinity" / "-Infinity", and null means unknown.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Sequence
from typing import Any

import typer
from rich.console import Console

# Version of every `--json` document kvctl prints (its `schema_version` field).
SCHEMA_VERSION = 1

_console: Console | None = None


def console() -> Console:
    """The shared stdout console (created lazily so tests can capture stdout)."""
    global _console
    if _console is None or _console.file is not _stdout():
        _console = Console(file=_stdout(), soft_wrap=False)
    return _console


def _stdout():
    import sys

    return sys.stdout


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, NamedTuples, enums, sequences and non-finite floats to plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):
        return {k: to_jsonable(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        return [to_jsonable(v) for v in obj]  # lists, tuples, a per-node read (TreeNodes)
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, float) and not math.isfinite(obj):
        return spell_non_finite(obj)
    return obj


def spell_non_finite(value: float) -> str:
    """NaN and infinities as the strings "NaN", "Infinity", "-Infinity": strict JSON has no
    literal for them, and null already means "unknown / not observable" in kvctl's output."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def versioned(data: Any) -> Any:
    """The `--json` document with `schema_version` first (a top-level mapping only). Bump
    SCHEMA_VERSION when a field changes meaning or goes away; adding fields does not."""
    document = to_jsonable(data)
    if isinstance(document, dict) and "schema_version" not in document:
        document = {"schema_version": SCHEMA_VERSION, **document}
    return document


def print_json(data: Any) -> None:
    """Print `data` as indented JSON on stdout (the `--json` contract): versioned, strict
    JSON (allow_nan=False: a non-finite float that escaped to_jsonable is a bug, not output)."""
    emit(json.dumps(versioned(data), indent=2, sort_keys=False, allow_nan=False))


def print_json_line(data: Any) -> None:
    """The same document as one compact line (for a reader that takes one line, e.g. the
    exporter's address announcement)."""
    emit(json.dumps(versioned(data), allow_nan=False))


def emit(line: str) -> None:
    """Write one machine-read document to the real stdout and flush it, holding the lock
    that keeps another thread's fd-1 redirect (an allocation, a tree dump) from capturing it."""
    from engine_adapter.stdout_lock import STDOUT_LOCK

    with STDOUT_LOCK:
        typer.echo(line)
        _stdout().flush()

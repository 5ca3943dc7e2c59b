"""What the operator may do with a snapshot source, decided from the protocol alone.

engine_adapter/protocol.py: a `ControllableSource` has `read_only = False` and pause /
resume / flush_cache; anything else (a remote attach, a plain SnapshotSource) is read-only.
A live run additionally offers `paused`, `finished`, `error` and `step_once()`; they are
optional here, so any source works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine_adapter.protocol import SnapshotSource

SourceOrFactory = SnapshotSource | Callable[[], SnapshotSource]
CONTROL_METHODS = ("pause", "resume", "flush_cache")


def is_source(candidate: Any) -> bool:
    """A built source (has snapshot()), as opposed to a factory that builds one."""
    return callable(getattr(candidate, "snapshot", None))


def is_read_only(source: Any) -> bool:
    if getattr(source, "read_only", True):
        return True
    return not all(callable(getattr(source, name, None)) for name in CONTROL_METHODS)


def can_step(source: Any) -> bool:
    return not is_read_only(source) and callable(getattr(source, "step_once", None))


def run_state(source: Any, *, paused: bool) -> str:
    """One of the status bar's states: failed, finished, paused, read-only, live."""
    if getattr(source, "error", None):
        return "failed"
    if getattr(source, "finished", False):
        return "finished"
    if is_read_only(source):
        return "read-only"
    return "paused" if getattr(source, "paused", paused) else "live"

"""The one protocol every engine (embedded, remote) offers to the CLI, TUI and exporter.

Consumers only ever see `Snapshot`s and receipts. An engine that runs a workload itself
(the embedded engine driven by a live run) additionally offers control methods; a remote
engine is read-only and raises `InputError` for them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from engine_adapter.receipts import Receipt
from engine_adapter.snapshot import Snapshot


@runtime_checkable
class SnapshotSource(Protocol):
    """Anything that yields consistent snapshots: an engine, a live run, a remote attach."""

    def snapshot(self) -> Snapshot:
        """One consistent read. Never blocks on the workload for long; never mutates."""
        ...

    def take_receipts(self) -> list[Receipt]:
        """Receipts since the last call (drains them)."""
        ...

    def close(self) -> None:
        """Stop background work and release sockets/threads. Idempotent."""
        ...


@runtime_checkable
class ControllableSource(SnapshotSource, Protocol):
    """A source whose workload the operator can steer (embedded live runs only)."""

    read_only: bool

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def flush_cache(self) -> None:
        """Drop every unlocked cached prefix (SGLang's flush semantics)."""
        ...

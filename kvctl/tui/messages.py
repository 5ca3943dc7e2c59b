"""Messages the monitor's widgets post to each other (dataclasses, as Textual allows).

They carry ids and text only, never engine objects: the UI only ever sees snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class JumpToRequestPath(Message):
    """The operator picked a request: open the tree browser at the path it holds.

    node_id: the request's lease anchor from `RequestView.lease_node` (None when it
    holds no path yet, e.g. a waiting request)."""

    rid: str
    node_id: int | None


@dataclass
class TreeFilterChanged(Message):
    """The `/` filter was submitted; an empty query clears it."""

    query: str


@dataclass
class SourceFailed(Message):
    """Building or reading the snapshot source failed; `error` is one line for notify()."""

    error: str

"""A per-node read of the radix tree, stored by column (`Snapshot.tree_nodes`).

A per-node read of a large tree is 100k nodes and lives until the next read (about one a
second in a live view). Stored as 100k objects, every full pass of Python's cyclic garbage
collector rescans them all: on a 2-core machine that was a 100-270 ms pause every few
frames of `kvctl monitor` (benchmarks/bench_tui.py). Stored by column, the read is ten
plain tuples of ints and strings, which the collector untracks after its first pass, so a
per-node read costs the collector nothing while it is shown::

    row:          0       1       2     ...      (SGLang's depth-first order)
    node_id     ( 3,      2,      4,    ... )
    parent_id   ( None,   3,      3,    ... )    None: a child of the root
    tokens      ( 3488,   4176,   6064, ... )
    holders     ( ("r1",), (),    ("r1",), ...)
    ...

`TreeNodes` is a read-only `Sequence[TreeNodeView]`: iteration and indexing build the
row's `TreeNodeView` on demand (short-lived, freed by reference counting), so code that
walks a tree reads as before; hot paths (the TUI's index) read the columns directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, overload


class TreeNodeView(NamedTuple):
    """One radix-tree node as SGLang prints it, plus what kvctl derives about it.

    recorded_lock_ref: SGLang's own count. derived_lock_ref: live leases whose locked path
    contains the node. holders: those leases (request ids, `session:<id>`). namespace:
    the hashed label of the holders' namespace when a lease explains the node, else None
    (SGLang's printout does not name a node's namespace). Token ids are never included.
    Build it with keywords.
    """

    node_id: int
    parent_id: int | None
    depth: int
    tokens: int
    pages: int
    recorded_lock_ref: int
    derived_lock_ref: int
    holders: tuple[str, ...] = ()
    namespace: str | None = None
    medium: str = "device"


COLUMNS: tuple[str, ...] = TreeNodeView._fields
_DEFAULTS = TreeNodeView._field_defaults


class TreeNodes(Sequence[TreeNodeView]):
    """Immutable columns of one per-node read; a `Sequence` of `TreeNodeView` rows.

    Every column is a tuple of the same length. Equal reads compare equal, also to a plain
    tuple of the same `TreeNodeView`s. Picklable (snapshots cross process boundaries).
    """

    __slots__ = COLUMNS

    def __init__(self, **columns: Sequence) -> None:
        """Columns by name (`TreeNodeView`'s fields); defaulted columns may be omitted.
        Raises ValueError for an unknown column or columns of different lengths."""
        unknown = columns.keys() - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown tree node columns: {', '.join(sorted(unknown))}")
        length = len(columns["node_id"]) if "node_id" in columns else 0
        for name in COLUMNS:
            if name in columns:
                values = tuple(columns[name])
            elif name in _DEFAULTS:
                values = (_DEFAULTS[name],) * length
            else:
                raise ValueError(f"tree node column {name!r} is missing")
            if len(values) != length:
                raise ValueError(f"tree node column {name!r} has {len(values)} rows, "
                                 f"node_id has {length}")
            object.__setattr__(self, name, values)

    @classmethod
    def of(cls, views: Iterable[TreeNodeView]) -> TreeNodes:
        """Columns of an iterable of rows (tests and small trees build rows)."""
        views = tuple(views)
        if not views:
            return EMPTY
        return cls(**dict(zip(COLUMNS, zip(*views))))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("TreeNodes is immutable")

    def __len__(self) -> int:
        return len(self.node_id)

    @overload
    def __getitem__(self, row: int) -> TreeNodeView: ...

    @overload
    def __getitem__(self, row: slice) -> tuple[TreeNodeView, ...]: ...

    def __getitem__(self, row):
        if isinstance(row, slice):
            return tuple(self.row(i) for i in range(*row.indices(len(self))))
        return self.row(range(len(self))[row])

    def row(self, index: int) -> TreeNodeView:
        """The `TreeNodeView` at position `index` (no negative indexing)."""
        return TreeNodeView(*(getattr(self, name)[index] for name in COLUMNS))

    def __iter__(self) -> Iterator[TreeNodeView]:
        return map(TreeNodeView, *(getattr(self, name) for name in COLUMNS))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TreeNodes):
            return all(getattr(self, n) == getattr(other, n) for n in COLUMNS)
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in COLUMNS))

    def __reduce__(self):
        return (_rebuild, (tuple(getattr(self, name) for name in COLUMNS),))

    def __repr__(self) -> str:
        return f"TreeNodes({len(self)} nodes)"


def _rebuild(columns: tuple[tuple, ...]) -> TreeNodes:
    return TreeNodes(**dict(zip(COLUMNS, columns)))


EMPTY = TreeNodes(**{name: () for name in COLUMNS})

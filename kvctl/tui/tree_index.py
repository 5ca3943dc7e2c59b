"""An index over one per-node tree read (`Snapshot.tree_nodes`), for the lazy tree browser.

The browser never mounts the whole tree: it asks for one parent's children at a time, at
most `limit` of them (largest first), and shows how many it left out. Building the index
is one pass over the nodes; sorting happens per parent, only when that parent is expanded.

::

    tree_nodes (SGLang's depth-first order)       TreeIndex (rows are positions in the read)
    row 0 [3] parent None   3,488 tok             children[ROOT] = (0,)
    row 1 [2] parent 3      4,176 tok             children[3]    = (1, 2)  -> shown [4, 2]
    row 2 [4] parent 3      6,064 tok             path(2)        = [3, 2]   (root excluded)

Pure: no Textual, no I/O. Node ids are SGLang's; the root has no `TreeNodeView` of its own
and is addressed as ROOT (None), like `TreeNodeView.parent_id` does for its children.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from typing import NamedTuple

import numpy as np

from engine_adapter.snapshot import TreeNodes, TreeNodeView

ROOT = None  # parent_id of the root's children (engine_adapter/snapshot.py)
_ROOT_KEY = -1  # ROOT in the parent array (SGLang's node ids are >= 0)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # node ids fit the lookup arrays' int64


class ChildPage(NamedTuple):
    """The children to show under one parent, and how many were left out."""

    shown: tuple[TreeNodeView, ...]
    hidden: int


class RowPage(NamedTuple):
    """`ChildPage` by row: positions in the read, each shown child's own child count, and
    how many were left out. What the browser syncs from without building a view per row."""

    rows: tuple[int, ...]
    child_counts: tuple[int, ...]
    hidden: int


class TreeIndex:
    """Read-only lookups over one per-node read. Mutates only its own caches.

    Reads the read's columns (`TreeNodes`) and keeps rows as integer positions, so the
    index of a 100k-node tree is five integer arrays: no object per node or per parent for
    the garbage collector to rescan or for reference counting to free (see
    engine_adapter/tree_nodes.py).
    `TreeNodeView`s are built only for what is asked: a page of children, one node.
    """

    def __init__(self, nodes: TreeNodes | tuple[TreeNodeView, ...],
                 previous: TreeIndex | None = None) -> None:
        """Index `nodes`. `previous`: the index of the read before; when `nodes` has the
        same node ids (and parents) in the same order, its lookups are shared instead of
        rebuilt (a read whose shape did not change: only sizes, refs, holders moved)."""
        self.nodes = nodes if isinstance(nodes, TreeNodes) else TreeNodes.of(nodes)
        cols = self.nodes
        count = len(cols.node_id)
        if previous is not None and previous.nodes.node_id == cols.node_id:
            self._by_id, self._sorted_ids = previous._by_id, previous._sorted_ids
        else:
            # Node id -> row as two arrays (rows ordered by node id, and those ids), looked
            # up by binary search: a dict of 100k ints cost ~10 ms to build and free per read.
            ids = np.fromiter(cols.node_id, dtype=np.int64, count=count)
            self._by_id = np.argsort(ids, kind="stable")
            self._sorted_ids = ids[self._by_id]
            previous = None
        if previous is not None and previous.nodes.parent_id == cols.parent_id:
            self._parents = previous._parents
            self._by_parent, self._parent_sorted = previous._by_parent, previous._parent_sorted
        else:
            # Children as one sorted array (CSR): rows ordered by parent id, tree order kept
            # within a parent; a parent's children are the slice its id spans. Two arrays,
            # not one list per parent: nothing here for the garbage collector to rescan.
            self._parents = np.array(
                [_ROOT_KEY if p is None else p for p in cols.parent_id], dtype=np.int64
            )
            self._by_parent = np.argsort(self._parents, kind="stable")
            self._parent_sorted = self._parents[self._by_parent]
        # Sorting depends on sizes, which may have changed: never shared.
        self._ordered: dict[tuple[int | None, int], tuple[int, ...]] = {}

    def _row_of(self, node_id: object) -> int | None:
        """The row of `node_id` in the read, None if absent."""
        if not isinstance(node_id, (int, np.integer)) or isinstance(node_id, bool):
            return None
        if not _INT64_MIN <= node_id <= _INT64_MAX:  # "#99999999999999999999" in the filter
            return None
        ids = self._sorted_ids
        at = int(ids.searchsorted(node_id))
        if at < len(ids) and int(ids[at]) == node_id:
            return int(self._by_id[at])
        return None

    def _child_rows(self, parent: int | None) -> np.ndarray:
        key = _ROOT_KEY if parent is None else parent
        lo = int(np.searchsorted(self._parent_sorted, key, side="left"))
        hi = int(np.searchsorted(self._parent_sorted, key, side="right"))
        return self._by_parent[lo:hi]

    def rows_of(self, node_ids: Collection[int]) -> np.ndarray:
        """Rows of `node_ids` (in their iteration order), -1 for an id not in the read:
        one vectorized lookup for many ids."""
        if isinstance(node_ids, np.ndarray):
            keys = node_ids.astype(np.int64, copy=False)
        else:
            keys = np.fromiter(node_ids, dtype=np.int64, count=len(node_ids))
        ids = self._sorted_ids
        if not len(ids):
            return np.full(len(keys), -1, dtype=np.int64)
        at = ids.searchsorted(keys).clip(max=len(ids) - 1)
        return np.where(ids[at] == keys, self._by_id[at], -1)

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node_id: object) -> bool:
        return self._row_of(node_id) is not None

    def get(self, node_id: int | None) -> TreeNodeView | None:
        row = self._row_of(node_id)
        return None if row is None else self.nodes.row(row)

    def parent_of(self, node_id: int) -> int | None:
        """The parent id of a node in this read (ROOT for the root's children); KeyError
        for a node not in the read."""
        row = self._row_of(node_id)
        if row is None:
            raise KeyError(node_id)
        return self.nodes.parent_id[row]

    def child_count(self, parent: int | None) -> int:
        return len(self._child_rows(parent))

    @property
    def cached_tokens(self) -> int:
        return sum(self.nodes.tokens)

    def children(
        self,
        parent: int | None,
        *,
        limit: int,
        keep: Collection[int] | None = None,
        pinned: Collection[int] = (),
    ) -> ChildPage:
        """Up to `limit` children of `parent`, largest first (ties by node id).

        keep: when given, only these node ids are eligible (the filter's matches and their
        ancestors). pinned: ids shown even beyond `limit` (the path a jump opened)."""
        page = self.child_rows(parent, limit=limit, keep=keep, pinned=pinned, counts=False)
        row = self.nodes.row
        return ChildPage(shown=tuple(row(r) for r in page.rows), hidden=page.hidden)

    def child_rows(
        self,
        parent: int | None,
        *,
        limit: int,
        keep: Collection[int] | None = None,
        pinned: Collection[int] = (),
        counts: bool = True,
    ) -> RowPage:
        """`children()` by row, with each shown child's child count (one vectorized
        lookup for the page; empty when `counts` is False)."""
        ids = self.nodes.node_id
        candidates = self._child_rows(parent).tolist()
        if keep is not None:
            candidates = [row for row in candidates if ids[row] in keep]
        shown = self._first(parent, candidates, limit, cacheable=keep is None)
        if pinned and len(candidates) > len(shown):
            # pinned children beyond the limit, in tree order: rows of the pinned ids (one
            # vectorized lookup), kept where they are candidates not shown yet
            pinned_rows = self.rows_of(tuple(pinned))
            extra = np.asarray(candidates, dtype=np.int64)
            extra = extra[np.isin(extra, pinned_rows) & ~np.isin(extra, shown)]
            shown = shown + tuple(extra.tolist())
        child_counts: tuple[int, ...] = ()
        if counts and shown:
            keys = np.fromiter((ids[row] for row in shown), dtype=np.int64, count=len(shown))
            lo = np.searchsorted(self._parent_sorted, keys, side="left")
            hi = np.searchsorted(self._parent_sorted, keys, side="right")
            child_counts = tuple((hi - lo).tolist())
        return RowPage(rows=shown, child_counts=child_counts, hidden=len(candidates) - len(shown))

    def _first(self, parent, candidates: list[int], limit: int, *,
               cacheable: bool) -> tuple[int, ...]:
        tokens, ids = self.nodes.tokens, self.nodes.node_id

        def largest_first(row: int) -> tuple[int, int]:
            return (-tokens[row], ids[row])

        if len(candidates) <= limit:
            return tuple(sorted(candidates, key=largest_first))
        key = (parent, limit)
        if cacheable and key in self._ordered:
            return self._ordered[key]
        # the `limit` largest of many (a shared prefix has thousands of children): one
        # vectorized sort by (-tokens, node id), the order heapq.nsmallest would give
        count = len(candidates)
        sizes = np.fromiter((tokens[row] for row in candidates), dtype=np.int64, count=count)
        names = np.fromiter((ids[row] for row in candidates), dtype=np.int64, count=count)
        order = np.lexsort((names, -sizes))[:limit]
        first = tuple(np.asarray(candidates, dtype=np.int64)[order].tolist())
        if cacheable:
            self._ordered[key] = first
        return first

    def path(self, node_id: int) -> list[int]:
        """Node ids from the root's child down to `node_id` (inclusive); [] if unknown."""
        ids, parents = self.nodes.node_id, self.nodes.parent_id
        path: list[int] = []
        row = self._row_of(node_id)
        while row is not None:
            path.append(ids[row])
            parent = parents[row]
            row = None if parent is None else self._row_of(parent)
        path.reverse()
        return path

    def ancestors(self, node_ids: Collection[int]) -> set[int]:
        """The ids on the paths to every id of `node_ids` in the read (ids included; absent
        ids contribute nothing): `path()` for many ids at once, one vectorized lookup per
        level of depth instead of one per node."""
        found: set[int] = set()
        rows = self.rows_of(node_ids)
        rows = rows[rows >= 0]
        ids = self.nodes.node_id
        while len(rows):
            rows = np.unique(rows)
            found.update(ids[row] for row in rows.tolist())
            parents = self._parents[rows]
            parents = parents[parents != _ROOT_KEY]
            rows = self.rows_of(parents) if len(parents) else parents
            rows = rows[rows >= 0]
        return found

    def path_tokens(self, node_id: int) -> int:
        """Tokens from the root to the end of `node_id`: the prefix length the node completes."""
        tokens = self.nodes.tokens
        return sum(tokens[self._row_of(n)] for n in self.path(node_id))

    def matches(self, query: str, *, limit: int) -> list[int]:
        """Node ids matching `query`, in tree order, at most `limit`.

        `#12` or `12` matches node 12; any other text matches (case-insensitively) a holder
        request id, a namespace label or a medium."""
        query = query.strip()
        if not query:
            return []
        digits = query.removeprefix("#")
        if digits.isdigit():
            return [int(digits)] if int(digits) in self else []
        needle = query.lower()
        cols = self.nodes
        found: list[int] = []
        for node_id, holders, namespace, medium in zip(
            cols.node_id, cols.holders, cols.namespace, cols.medium
        ):
            if (
                any(needle in holder.lower() for holder in holders)
                or (namespace is not None and needle in namespace.lower())
                or needle in medium.lower()
            ):
                found.append(node_id)
                if len(found) >= limit:
                    break
        return found

    def node_held_by(self, rid: str) -> int | None:
        """The deepest node whose holders include `rid` (the end of the path it locks)."""
        cols = self.nodes
        best: tuple[int, int] | None = None  # (depth, node id)
        for node_id, holders, depth in zip(cols.node_id, cols.holders, cols.depth):
            if rid in holders and (best is None or depth > best[0]):
                best = (depth, node_id)
        return None if best is None else best[1]

    def keep_for(self, node_ids: Collection[int]) -> set[int]:
        """`node_ids` plus every ancestor: what a filtered view must show to reach them."""
        keep: set[int] = set()
        for node_id in node_ids:
            for step in reversed(self.path(node_id)):
                if step in keep:
                    break
                keep.add(step)
        return keep


_last: tuple[TreeNodes, TreeIndex] | None = None


def index_for(nodes: TreeNodes) -> TreeIndex:
    """The TreeIndex of `nodes`, reusing the last one built for the same tuple object.

    The app's polling worker calls this off the UI thread as soon as a per-node read
    arrives (building the index of a 100k-node tree is the costliest step of a refresh),
    so the tree panel's call on the UI thread finds it ready. A read of the same shape as
    the last one shares its lookups (TreeIndex's `previous`). One entry; the swap is a
    single assignment, safe across threads."""
    global _last
    last = _last
    if last is not None and last[0] is nodes:
        return last[1]
    index = TreeIndex(nodes, previous=last[1] if last is not None else None)
    _last = (nodes, index)
    return index

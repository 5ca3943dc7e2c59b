"""An index over one per-node tree read (`Snapshot.tree_nodes`), for the lazy tree browser.

The browser never mounts the whole tree: it asks for one parent's children at a time, at
most `limit` of them (largest first), and shows how many it left out. Building the index
is one pass over the nodes; sorting happens per parent, only when that parent is expanded.

::

    tree_nodes (SGLang's depth-first order)       TreeIndex
    [3] parent None   3,488 tok                   children[ROOT] = [3]
      [2] parent 3    4,176 tok                   children[3]    = [4, 2]   (largest first)
      [4] parent 3    6,064 tok                   path(2)        = [3, 2]   (root excluded)

Pure: no Textual, no I/O. Node ids are SGLang's; the root has no `TreeNodeView` of its own
and is addressed as ROOT (None), like `TreeNodeView.parent_id` does for its children.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from typing import NamedTuple

from engine_adapter.snapshot import TreeNodeView

ROOT = None  # parent_id of the root's children (engine_adapter/snapshot.py)


class ChildPage(NamedTuple):
    """The children to show under one parent, and how many were left out."""

    shown: tuple[TreeNodeView, ...]
    hidden: int


def _largest_first(node: TreeNodeView) -> tuple[int, int]:
    return (-node.tokens, node.node_id)


class TreeIndex:
    """Read-only lookups over one tuple of `TreeNodeView`s. Mutates only its own caches."""

    def __init__(self, nodes: tuple[TreeNodeView, ...]) -> None:
        self.nodes = nodes
        self.by_id: dict[int, TreeNodeView] = {node.node_id: node for node in nodes}
        children: dict[int | None, list[TreeNodeView]] = {}
        for node in nodes:
            bucket = children.get(node.parent_id)
            if bucket is None:
                children[node.parent_id] = [node]
            else:
                bucket.append(node)
        self._children = children
        self._ordered: dict[tuple[int | None, int], list[TreeNodeView]] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, node_id: int | None) -> TreeNodeView | None:
        return None if node_id is None else self.by_id.get(node_id)

    def child_count(self, parent: int | None) -> int:
        return len(self._children.get(parent, ()))

    @property
    def cached_tokens(self) -> int:
        return sum(node.tokens for node in self.nodes)

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
        candidates = self._children.get(parent, ())
        if keep is not None:
            candidates = [node for node in candidates if node.node_id in keep]
        shown = self._first(parent, candidates, limit, cacheable=keep is None)
        if pinned and len(candidates) > len(shown):
            present = {node.node_id for node in shown}
            extra = [
                node
                for node in candidates
                if node.node_id in pinned and node.node_id not in present
            ]
            shown = shown + extra
        return ChildPage(shown=tuple(shown), hidden=len(candidates) - len(shown))

    def _first(self, parent, candidates, limit: int, *, cacheable: bool) -> list[TreeNodeView]:
        if len(candidates) <= limit:
            return sorted(candidates, key=_largest_first)
        key = (parent, limit)
        if cacheable and key in self._ordered:
            return self._ordered[key]
        first = heapq.nsmallest(limit, candidates, key=_largest_first)
        if cacheable:
            self._ordered[key] = first
        return first

    def path(self, node_id: int) -> list[int]:
        """Node ids from the root's child down to `node_id` (inclusive); [] if unknown."""
        path: list[int] = []
        node = self.by_id.get(node_id)
        while node is not None:
            path.append(node.node_id)
            node = self.by_id.get(node.parent_id) if node.parent_id is not None else None
        path.reverse()
        return path

    def path_tokens(self, node_id: int) -> int:
        """Tokens from the root to the end of `node_id`: the prefix length the node completes."""
        return sum(self.by_id[n].tokens for n in self.path(node_id))

    def matches(self, query: str, *, limit: int) -> list[int]:
        """Node ids matching `query`, in tree order, at most `limit`.

        `#12` or `12` matches node 12; any other text matches (case-insensitively) a holder
        request id, a namespace label or a medium."""
        query = query.strip()
        if not query:
            return []
        digits = query.removeprefix("#")
        if digits.isdigit():
            return [int(digits)] if int(digits) in self.by_id else []
        needle = query.lower()
        found: list[int] = []
        for node in self.nodes:
            if (
                any(needle in holder.lower() for holder in node.holders)
                or (node.namespace is not None and needle in node.namespace.lower())
                or needle in node.medium.lower()
            ):
                found.append(node.node_id)
                if len(found) >= limit:
                    break
        return found

    def node_held_by(self, rid: str) -> int | None:
        """The deepest node whose holders include `rid` (the end of the path it locks)."""
        best: TreeNodeView | None = None
        for node in self.nodes:
            if rid in node.holders and (best is None or node.depth > best.depth):
                best = node
        return None if best is None else best.node_id

    def keep_for(self, node_ids: Collection[int]) -> set[int]:
        """`node_ids` plus every ancestor: what a filtered view must show to reach them."""
        keep: set[int] = set()
        for node_id in node_ids:
            for step in reversed(self.path(node_id)):
                if step in keep:
                    break
                keep.add(step)
        return keep


_last: tuple[tuple[TreeNodeView, ...], TreeIndex] | None = None


def index_for(nodes: tuple[TreeNodeView, ...]) -> TreeIndex:
    """The TreeIndex of `nodes`, reusing the last one built for the same tuple object.

    The app's polling worker calls this off the UI thread as soon as a per-node read
    arrives (building the index of a 100k-node tree is the costliest step of a refresh),
    so the tree panel's call on the UI thread finds it ready. One entry; the swap is a
    single assignment, safe across threads."""
    global _last
    last = _last
    if last is not None and last[0] is nodes:
        return last[1]
    index = TreeIndex(nodes)
    _last = (nodes, index)
    return index

"""Read SGLang's own per-node view of its radix tree: `pretty_print()`.

Both tree cores print one line per node, root first, in SGLang's format::

     [12] 4 full_lock=0 full=yes
     ^id  ^key tokens  ^recorded lock_ref

With the Rust core that printout is the only published place where per-node lock refs are
visible (its production binding exposes no per-node getter; `collect_path_info` gives
structure but not refs), so kvctl captures it at the file-descriptor level (the Rust core
writes to fd 1 directly; the Python core goes through `sys.stdout`). This costs a full tree
walk: use it for integrity checks (`kvctl check`, tests), not on a live exporter path.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from typing import Any, NamedTuple

from engine_adapter.stdout_lock import STDOUT_LOCK

_LINE = re.compile(r"^\s*\[(\d+)\]\s+(\d+)\s+full_lock=(-?\d+)")


class DumpedNode(NamedTuple):
    node_id: int
    key_tokens: int
    lock_ref: int
    parent_id: int | None  # None for a child of the root
    depth: int  # 1 for a child of the root


def capture_pretty_print(tree_cache: Any) -> str:
    """Run `tree_cache.pretty_print()` and return everything it printed."""
    with STDOUT_LOCK:
        return _capture(tree_cache)


def _capture(tree_cache: Any) -> str:
    sys.stdout.flush()
    python_side = io.StringIO()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved_fd = os.dup(1)
        try:
            os.dup2(sink.fileno(), 1)
            with contextlib.redirect_stdout(python_side):
                tree_cache.pretty_print()
            sys.stdout.flush()
        finally:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
        sink.seek(0)
        native_side = sink.read().decode("utf-8", "replace")
    return native_side + python_side.getvalue()


def dump_nodes(tree_cache: Any) -> list[DumpedNode]:
    """Every node except the root (the first line), with its recorded lock_ref and its
    parent. SGLang prints a depth-first walk, indenting each level by two more spaces than
    its parent, so the parent of a line is the nearest earlier line one level up."""
    nodes: list[DumpedNode] = []
    stack: list[tuple[int, int]] = []  # (indent, node id) of the current path
    root_seen = False
    for line in capture_pretty_print(tree_cache).splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        node_id = int(match[1])
        if root_seen:
            parent = stack[-1][1] if len(stack) > 1 else None
            nodes.append(DumpedNode(node_id, int(match[2]), int(match[3]), parent, len(stack)))
        root_seen = True
        stack.append((indent, node_id))
    return nodes

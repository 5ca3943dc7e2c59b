"""sglang-router's approximate radix tree, over integer keys (one element = one character).

Mirrors `src/policies/tree.rs` of sglang-router 0.3.2 (crate sgl-model-gateway 0.3.2, read
from the PyPI sdist sglang_router-0.3.2.tar.gz; docs/fleet-router.md says how it was pinned).
The Rust tree is a character-level radix tree shared by every tenant (worker URL) of one
model; here a "character" is one element of an integer array and a tenant is a replica
index. Written from the Rust rules, not translated line by line; comments name the Rust
function each rule mirrors.

What is mirrored exactly:
- `insert`: a tenant is recorded on every node of the inserted path (an existing node it
  reaches first gets access time 0, "intermediate, no timestamp update"); a mismatch inside
  an edge splits it, and the upper half inherits the lower half's tenants, times and cached
  tenant; the node where the text ends (a new leaf, or an existing/split node) gets a fresh
  epoch for the inserting tenant. `tenant_char_count` grows by the characters of every node
  the tenant newly joins.
- `prefix_match`: walk while edges match fully; a partial edge match still counts its shared
  characters and stops *on that child*. The tenant returned is the node's cached
  `last_tenant` (the tenant that created the node; a split's upper half inherits it) while
  that tenant is still on the node; otherwise the Rust code takes the first key of the node's
  DashMap (see "not mirrored"). Every match draws an epoch, and when `epoch & 7 == 0` it
  stamps the node's access time for the returned tenant (the "1 in 8" sampled LRU update).
- LRU clock: a monotone epoch counter (`get_epoch`, one tick per leaf creation / insert end /
  match), not wall time. sglang-router 0.3.2 has no wall-clock timestamps in the tree.
- `evict_tenant_by_size(max_size)`: a min-heap of (access time, tenant, node) over every node
  that is a leaf *for that tenant* (no child carries it); pop oldest first; skip while the
  tenant's count is <= max_size; drop the tenant from the node, subtract the node's length,
  unlink the node if it has no tenants and no children, and push the parent when it has just
  become a leaf for the tenant. heapq's sift rules are the same as Rust's BinaryHeap (strict
  on the way up, right child on ties on the way down), compared on the time only.
- `remove_tenant`: drop a tenant from all its nodes leaf-upward and from the counts.

Not mirrored (documented in docs/fleet-router.md):
- DashMap/HashMap iteration order. Where the Rust code takes "the first tenant" of a node
  (stale `last_tenant` cache) it is the first key in a per-process random hash order; here it
  is the smallest replica index. The order of equal-time entries entering the eviction heap
  likewise follows hash order in Rust; here children in creation order, tenants by index.
- The epoch counter is process-global in Rust (shared by every tree, i.e. every model); here
  it is per tree, so the phase of the 1-in-8 sampled match update can differ.
- Concurrency: the Rust tree is read and written by many request tasks and the eviction
  thread at once; here every operation is atomic, in arrival order.
- The cold-start "empty" sentinel: with no tenant at the matched node Rust returns the tenant
  "empty" (and may record it there); here `None`. Under the cache_aware policy the root always
  carries every worker, so this cannot arise there.

Storage: each node holds its own compact copy of its characters (dtype fixed per tree), so the
memory is the stored characters times the element size plus a small per-node overhead.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable

import numpy as np

_HEAD = 32  # elements compared first, so an early mismatch does not scan a long edge


def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two 1-D arrays (tree.rs `shared_prefix_count`)."""
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    k = _HEAD if n > _HEAD else n
    neq = a[:k] != b[:k]
    if neq.any():
        return int(neq.argmax())
    if k == n:
        return n
    neq = a[k:n] != b[k:n]
    i = int(neq.argmax())
    return k + i if neq[i] else n


class _Node:
    __slots__ = ("text", "children", "tenants", "parent", "last_tenant")

    def __init__(self, text: np.ndarray, parent: _Node | None, last_tenant: Hashable | None):
        self.text = text  # this edge's characters
        self.children: dict[int, _Node] = {}  # keyed by the child's first character
        self.tenants: dict[Hashable, int] = {}  # tenant -> last access epoch
        self.parent = parent
        self.last_tenant = last_tenant  # tree.rs Node.last_tenant (the prefix_match cache)


class _HeapEntry:
    """tree.rs EvictionEntry: ordered by the access time only (Reverse => min-heap)."""

    __slots__ = ("ts", "tenant", "node")

    def __init__(self, ts: int, tenant: Hashable, node: _Node):
        self.ts = ts
        self.tenant = tenant
        self.node = node

    def __lt__(self, other: _HeapEntry) -> bool:
        return self.ts < other.ts


class ApproxTree:
    """One model's approximate tree, shared by all tenants (tree.rs `Tree`).

    Keys are 1-D integer arrays; `dtype` is the storage type (values must fit in it).
    """

    def __init__(self, dtype: type | np.dtype = np.int32):
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "iu":
            raise ValueError(f"ApproxTree dtype must be an integer type, got {self.dtype}")
        self._info = np.iinfo(self.dtype)
        self._empty = np.zeros(0, dtype=self.dtype)
        self.root = _Node(self._empty, None, None)
        self.tenant_char_count: dict[Hashable, int] = {}  # tree.rs Tree.tenant_char_count
        self._epoch = 0

    # -- helpers -----------------------------------------------------------------------

    def _next_epoch(self) -> int:
        """tree.rs `get_epoch`: fetch_add(1) on a monotone counter."""
        e = self._epoch
        self._epoch = e + 1
        return e

    @property
    def epoch(self) -> int:
        """The next epoch the tree will hand out (for tests and diagnostics)."""
        return self._epoch

    def as_key(self, key) -> np.ndarray:
        """`key` as a contiguous 1-D array of the tree's dtype (checked to fit)."""
        arr = np.asarray(key)
        if arr.ndim != 1:
            raise ValueError(f"a tree key must be 1-D, got shape {arr.shape}")
        if arr.dtype == self.dtype:
            return np.ascontiguousarray(arr)
        if arr.size:
            if arr.dtype.kind not in "iub":
                raise ValueError(f"a tree key must hold integers, got dtype {arr.dtype}")
            lo, hi = int(arr.min()), int(arr.max())
            if lo < self._info.min or hi > self._info.max:
                raise ValueError(
                    f"key values [{lo}, {hi}] do not fit the tree's {self.dtype} storage"
                )
        return arr.astype(self.dtype)

    # -- tree.rs Tree::insert ----------------------------------------------------------

    def insert(self, key, tenant: Hashable) -> None:
        """Record `key` as served by `tenant` (tree.rs `Tree::insert`)."""
        key = self.as_key(key)
        counts = self.tenant_char_count
        root = self.root
        # "Ensure tenant exists at root (don't update timestamp)" and in the counts.
        root.tenants.setdefault(tenant, 0)
        counts.setdefault(tenant, 0)
        n = key.shape[0]
        pos = 0
        prev = root
        while pos < n:
            first = int(key[pos])
            child = prev.children.get(first)
            if child is None:
                # Entry::Vacant: the rest of the text becomes one new leaf, stamped now.
                leaf = _Node(key[pos:].copy(), prev, tenant)
                counts[tenant] += n - pos
                leaf.tenants[tenant] = self._next_epoch()
                prev.children[first] = leaf
                return
            ctext = child.text
            clen = ctext.shape[0]
            shared = common_prefix_len(key[pos:], ctext)
            if shared < clen:
                # Entry::Occupied, partial: split; the upper half clones the tenants (and
                # their times) and the cached tenant of the node it splits.
                upper = _Node(ctext[:shared].copy(), prev, child.last_tenant)
                upper.tenants = dict(child.tenants)
                lower_text = ctext[shared:].copy()
                upper.children[int(lower_text[0])] = child
                prev.children[first] = upper
                child.text = lower_text
                child.parent = upper
                if tenant not in upper.tenants:
                    counts[tenant] += shared
                    upper.tenants[tenant] = 0
                prev = upper
            else:
                # Entry::Occupied, full edge: join the node (time 0) if not on it yet.
                if tenant not in child.tenants:
                    counts[tenant] += clen
                    child.tenants[tenant] = 0
                prev = child
            pos += shared
        # The text ended on an existing (or just split) node: stamp it for this tenant.
        prev.tenants[tenant] = self._next_epoch()

    # -- tree.rs Tree::prefix_match_with_counts ----------------------------------------

    def prefix_match(self, key) -> tuple[int, Hashable | None]:
        """(matched characters, tenant) for `key` (tree.rs `prefix_match_with_counts`).

        The tenant is None where the Rust tree answers its "empty" sentinel (no tenant at
        the node reached)."""
        key = self.as_key(key)
        n = key.shape[0]
        pos = 0
        curr = self.root
        while pos < n:
            child = curr.children.get(int(key[pos]))
            if child is None:
                break
            shared = common_prefix_len(key[pos:], child.text)
            pos += shared
            curr = child  # a partial match still selects the child
            if shared != child.text.shape[0]:
                break
        tenants = curr.tenants
        tenant = curr.last_tenant
        if tenant is None or tenant not in tenants:
            # Rust: the first key of the node's DashMap (hash order); here the smallest.
            tenant = min(tenants, key=_order) if tenants else None
            curr.last_tenant = tenant
        epoch = self._next_epoch()
        if epoch & 0x7 == 0 and tenant is not None:
            tenants[tenant] = epoch
        return pos, tenant

    # -- tree.rs Tree::evict_tenant_by_size --------------------------------------------

    @staticmethod
    def _leaf_tenants(node: _Node) -> list[Hashable]:
        """tree.rs `leaf_of`: the node's tenants that no child carries."""
        if not node.children:
            return sorted(node.tenants, key=_order)
        below: set = set()
        for c in node.children.values():
            below.update(c.tenants)
        return sorted((t for t in node.tenants if t not in below), key=_order)

    def evict_tenant_by_size(self, max_size: int) -> None:
        """Evict each tenant's least recently used leaves until it holds at most `max_size`
        characters (tree.rs `evict_tenant_by_size`)."""
        counts = self.tenant_char_count
        if not counts or max(counts.values()) <= max_size:
            # Every popped entry would hit the "used_size <= max_size: continue" test: the
            # Rust pass changes nothing. Skipping the walk is exact.
            return
        heap: list[_HeapEntry] = []
        stack = [self.root]
        while stack:
            curr = stack.pop()
            stack.extend(curr.children.values())
            for t in self._leaf_tenants(curr):
                heapq.heappush(heap, _HeapEntry(curr.tenants[t], t, curr))
        while heap:
            e = heapq.heappop(heap)
            tenant, node = e.tenant, e.node
            used = counts.get(tenant)
            if used is not None and used <= max_size:
                continue
            if tenant not in node.tenants or any(
                tenant in c.tenants for c in node.children.values()
            ):
                continue  # no longer a leaf for this tenant
            if used is not None:
                counts[tenant] = max(0, used - node.text.shape[0])  # saturating_sub
            del node.tenants[tenant]
            parent = node.parent
            if not node.children and not node.tenants and parent is not None:
                if node.text.shape[0]:
                    parent.children.pop(int(node.text[0]), None)
            if parent is not None and tenant in parent.tenants:
                if not any(tenant in c.tenants for c in parent.children.values()):
                    heapq.heappush(heap, _HeapEntry(parent.tenants[tenant], tenant, parent))

    # -- tree.rs Tree::remove_tenant ---------------------------------------------------

    def remove_tenant(self, tenant: Hashable) -> None:
        """Drop `tenant` from every node and from the counts (tree.rs `remove_tenant`)."""
        queue: list[_Node] = []
        stack = [self.root]
        while stack:
            curr = stack.pop()
            stack.extend(curr.children.values())
            if tenant in curr.tenants and not any(
                tenant in c.tenants for c in curr.children.values()
            ):
                queue.append(curr)
        i = 0
        while i < len(queue):
            curr = queue[i]
            i += 1
            curr.tenants.pop(tenant, None)
            parent = curr.parent
            if not curr.children and not curr.tenants and parent is not None:
                if curr.text.shape[0]:
                    parent.children.pop(int(curr.text[0]), None)
            if parent is not None and tenant in parent.tenants:
                if not any(tenant in c.tenants for c in parent.children.values()):
                    queue.append(parent)
        self.tenant_char_count.pop(tenant, None)

    # -- inspection (tests, diagnostics) -----------------------------------------------

    def used_size_per_tenant(self) -> dict[Hashable, int]:
        """Characters per tenant recomputed by a walk (tree.rs `get_used_size_per_tenant`)."""
        out: dict[Hashable, int] = {}
        stack = [self.root]
        while stack:
            curr = stack.pop()
            n = curr.text.shape[0]
            for t in curr.tenants:
                out[t] = out.get(t, 0) + n
            stack.extend(curr.children.values())
        return out

    def node_count(self) -> int:
        """Nodes below the root."""
        count = 0
        stack = list(self.root.children.values())
        while stack:
            curr = stack.pop()
            count += 1
            stack.extend(curr.children.values())
        return count

    def stored_chars(self) -> int:
        """Characters held by all nodes (each shared edge once)."""
        total = 0
        stack = list(self.root.children.values())
        while stack:
            curr = stack.pop()
            total += curr.text.shape[0]
            stack.extend(curr.children.values())
        return total


def _order(t: Hashable):
    """Deterministic tenant order (ints by value, anything else by its text)."""
    return (0, t, "") if isinstance(t, int) else (1, 0, str(t))

"""The prefix mirror rebuilt from KV events (engine_adapter/remote/event_mirror.py).

A small tree, page size 4:

    root - A - B - C          stored as one chain
               `- D - E       stored under B: B becomes a branching page, attaches(B) = 1
    root - F                  a second root
"""

from __future__ import annotations

import pytest

from engine_adapter.remote.event_mirror import PrefixMatch, PrefixMirror
from engine_adapter.remote.wire import AllCleared, RemovedBlocks, StoredBlocks

pytestmark = pytest.mark.unit

A, B, C, D, E, F = 101, 102, 103, 104, 105, 106


def stored(hashes, parent=None, medium="GPU", page=4):
    return StoredBlocks(
        block_hashes=tuple(hashes),
        parent_block_hash=parent,
        block_tokens=(page,) * len(hashes),
        medium=medium,
    )


def removed(hashes, medium="GPU"):
    return RemovedBlocks(block_hashes=tuple(hashes), medium=medium)


@pytest.fixture
def mirror():
    m = PrefixMirror()
    m.apply_all([stored([A, B, C]), stored([D, E], parent=B), stored([F])])
    m.check_integrity()
    return m


def test_blocks_and_tokens(mirror):
    """Six pages of four tokens: 24 GPU tokens."""
    assert (len(mirror), mirror.tokens("GPU")) == (6, 24)


def test_depth_follows_parent_links(mirror):
    """E sits under A, B, D: depth 4 pages = 16 tokens."""
    assert mirror.block(E).depth_tokens == 16


def test_shape_counts_leaves_roots_and_branching(mirror):
    """Leaves C, E, F; roots A, F; one branching page (B, fan-out 2) at depth 8."""
    shape = mirror.shape()
    assert (shape.leaves, shape.roots, shape.branching_blocks, shape.max_fan_out) == (3, 2, 1, 2)
    assert shape.max_shared_prefix_tokens == 8
    assert shape.fan_out_histogram == ((1, 2), (2, 1))


def test_hot_prefix_is_the_page_a_chain_attached_to(mirror):
    """B was extended once by a new chain; two chains started at the root."""
    shape = mirror.shape()
    assert [(h.depth_tokens, h.attaches, h.fan_out) for h in shape.hot_prefixes] == [(8, 1, 2)]
    assert shape.root_attaches == 2


def test_leaf_removal_updates_fan_out(mirror):
    """Removing E then D leaves B with a single child."""
    mirror.apply(removed([E, D]))
    mirror.check_integrity()
    assert (len(mirror), mirror.fan_out(B), mirror.shape().branching_blocks) == (4, 1, 0)


def test_host_copy_keeps_block_after_gpu_removal(mirror):
    """A page backed up to CPU_PINNED stays mirrored when its GPU copy is evicted."""
    mirror.apply(stored([C], parent=B, medium="CPU_PINNED"))
    mirror.apply(removed([C], medium="GPU"))
    mirror.check_integrity()
    assert (C in mirror, mirror.tokens("GPU"), mirror.tokens("CPU_PINNED")) == (True, 20, 4)


def test_unknown_removal_is_counted(mirror):
    """Removing a page the mirror never saw changes nothing and is counted."""
    mirror.apply(removed([999]))
    assert (len(mirror), mirror.shape().unknown_removals) == (6, 1)


def test_all_cleared_empties_the_mirror(mirror):
    """AllBlocksCleared drops every page in every medium."""
    mirror.apply(AllCleared())
    mirror.check_integrity()
    assert (len(mirror), mirror.shape().clears) == (0, 1)


def test_match_stops_at_first_missing_page(mirror):
    """A prompt hashing to A, B, X matches two pages (8 tokens)."""
    assert mirror.match([A, B, 999, C]) == PrefixMatch(blocks=2, tokens=8)


def test_match_in_one_medium(mirror):
    """A page held only on host does not count toward a GPU match; it does for any tier."""
    mirror.apply(stored([C], parent=B, medium="CPU_PINNED"))
    mirror.apply(removed([C], medium="GPU"))
    assert (mirror.match([A, B, C]).tokens, mirror.match([A, B, C], medium=None).tokens) == (8, 12)


def test_orphan_depth_is_marked_inexact():
    """A chain whose parent the mirror never saw has an inexact depth and counts as orphan."""
    m = PrefixMirror()
    m.apply(stored([D, E], parent=B))
    shape = m.shape()
    assert (shape.orphans, shape.depth_exact, shape.max_depth_tokens) == (1, False, 8)


def test_restore_of_same_hash_in_same_medium_is_idempotent(mirror):
    """Storing a page already held in that medium adds nothing."""
    mirror.apply(stored([A, B, C]))
    mirror.check_integrity()
    assert (len(mirror), mirror.tokens("GPU")) == (6, 24)


def test_labels_do_not_reveal_hashes(mirror):
    """Prefix labels are 8 hex digits, not the block hash."""
    label = mirror.shape().hot_prefixes[0].label
    assert len(label) == 8 and str(B) not in label

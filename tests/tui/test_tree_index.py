"""TreeIndex: the lazy tree browser's lookups over one per-node read (pure, no Textual)."""

from __future__ import annotations

import pytest

from engine_adapter.snapshot import TreeNodeView
from kvctl.tui.tree_index import ROOT, TreeIndex

pytestmark = pytest.mark.tui


def node(node_id, parent, depth, tokens, holders=(), namespace=None, medium="device"):
    return TreeNodeView(
        node_id=node_id,
        parent_id=parent,
        depth=depth,
        tokens=tokens,
        pages=-(-tokens // 16),
        recorded_lock_ref=len(holders),
        derived_lock_ref=len(holders),
        holders=tuple(holders),
        namespace=namespace,
        medium=medium,
    )


# root ── #3 (320) ─┬─ #2 (64, held by r1) ── #7 (16, held by r1)
#                   ├─ #4 (128, held by r2)
#                   └─ #5 (128)
# root ── #9 (32, host)
NODES = (
    node(3, ROOT, 1, 320, holders=("r1", "r2"), namespace="ns-aaaa"),
    node(2, 3, 2, 64, holders=("r1",), namespace="ns-aaaa"),
    node(7, 2, 3, 16, holders=("r1",), namespace="ns-aaaa"),
    node(4, 3, 2, 128, holders=("r2",), namespace="ns-bbbb"),
    node(5, 3, 2, 128),
    node(9, ROOT, 1, 32, medium="host"),
)


def test_children_largest_first_ties_by_id():
    """Children come largest first; equal sizes in node-id order."""
    page = TreeIndex(NODES).children(3, limit=10)
    assert [n.node_id for n in page.shown] == [4, 5, 2]
    assert page.hidden == 0


def test_children_limit_counts_hidden():
    """Beyond the limit, children are counted as hidden, not mounted."""
    page = TreeIndex(NODES).children(3, limit=2)
    assert [n.node_id for n in page.shown] == [4, 5]
    assert page.hidden == 1


def test_pinned_child_shown_beyond_limit():
    """A pinned node (the path of a jump) is shown even when the limit would hide it."""
    page = TreeIndex(NODES).children(3, limit=1, pinned={2})
    assert [n.node_id for n in page.shown] == [4, 2]
    assert page.hidden == 1


def test_keep_restricts_children():
    """With `keep`, only kept ids are eligible."""
    page = TreeIndex(NODES).children(3, limit=10, keep={2, 7})
    assert [n.node_id for n in page.shown] == [2]


def test_path_and_prefix_tokens():
    """path() runs root-child first to the node; path_tokens sums their tokens."""
    index = TreeIndex(NODES)
    assert index.path(7) == [3, 2, 7]
    assert index.path_tokens(7) == 320 + 64 + 16
    assert index.path(99) == []


def test_matches_node_id():
    """`#4` and `4` both find node 4; an unknown id finds nothing."""
    index = TreeIndex(NODES)
    assert index.matches("#4", limit=10) == [4]
    assert index.matches("4", limit=10) == [4]
    assert index.matches("#40", limit=10) == []


def test_matches_holder_namespace_and_medium():
    """Text matches holders, namespaces and media, case-insensitively, in tree order."""
    index = TreeIndex(NODES)
    assert index.matches("R1", limit=10) == [3, 2, 7]
    assert index.matches("ns-bb", limit=10) == [4]
    assert index.matches("host", limit=10) == [9]
    assert index.matches("r1", limit=2) == [3, 2]


def test_keep_for_adds_ancestors():
    """A filtered view keeps each match and every ancestor on the way to it."""
    assert TreeIndex(NODES).keep_for([7, 9]) == {3, 2, 7, 9}


def test_node_held_by_is_deepest():
    """The node a request holds is the deepest one listing it as a holder."""
    index = TreeIndex(NODES)
    assert index.node_held_by("r1") == 7
    assert index.node_held_by("r2") == 4
    assert index.node_held_by("nobody") is None


def test_child_count():
    """child_count counts every child, shown or not; ROOT has the top-level nodes."""
    index = TreeIndex(NODES)
    assert index.child_count(ROOT) == 2
    assert index.child_count(3) == 3
    assert index.child_count(7) == 0


def test_a_read_of_the_same_shape_shares_lookups_and_sorts_by_its_own_sizes():
    """Same node ids and parents as the last read, new sizes: the id and parent lookups
    are the previous index's, while children order, sizes and paths are the new read's
    (#2 grew from 64 to 500 tokens and now comes first under #3)."""
    old = TreeIndex(NODES)
    old.children(3, limit=2)  # fills the old index's order cache for (3, 2)
    grown = tuple(n._replace(tokens=500) if n.node_id == 2 else n for n in NODES)
    new = TreeIndex(grown, previous=old)
    assert new._by_id is old._by_id and new._by_parent is old._by_parent
    assert [n.node_id for n in new.children(3, limit=2).shown] == [2, 4]
    assert new.get(2).tokens == 500 and new.path_tokens(7) == 320 + 500 + 16


def test_a_read_with_new_nodes_is_indexed_from_scratch():
    """A read with a node the last one lacked (#11 under #9) builds its own lookups."""
    old = TreeIndex(NODES)
    new = TreeIndex(NODES + (node(11, 9, 2, 48),), previous=old)
    assert new._by_id is not old._by_id
    assert 11 in new and new.path(11) == [9, 11] and new.child_count(9) == 1
    assert 11 not in old


def test_a_read_whose_parents_moved_rebuilds_the_children():
    """Same node ids, but #5 now hangs under #9: the children lists are the new read's."""
    old = TreeIndex(NODES)
    moved = tuple(n._replace(parent_id=9, depth=2) if n.node_id == 5 else n for n in NODES)
    new = TreeIndex(moved, previous=old)
    assert [n.node_id for n in new.children(3, limit=10).shown] == [4, 2]
    assert [n.node_id for n in new.children(9, limit=10).shown] == [5]
    assert new.path(5) == [9, 5]


def test_child_rows_match_children_with_each_childs_count():
    """child_rows() is children() by row position, with each shown child's child count."""
    index = TreeIndex(NODES)
    page = index.child_rows(3, limit=2)
    assert [index.nodes.node_id[row] for row in page.rows] == [4, 5]
    assert page.child_counts == (0, 0) and page.hidden == 1
    page = index.child_rows(ROOT, limit=10)
    assert [index.nodes.node_id[row] for row in page.rows] == [3, 9]
    assert page.child_counts == (3, 0)


def test_row_key_is_the_label_key_of_the_row():
    """The label key read from the columns equals the one of the row's view."""
    from kvctl.tui.widgets.tree.node_label import label_key, row_key

    nodes = TreeIndex(NODES).nodes
    for row, view in enumerate(nodes):
        assert row_key(nodes, row, 4) == label_key(view, 4)


def test_rows_of_and_ancestors_are_path_for_many_ids():
    """rows_of() finds each id's row (-1 when absent); ancestors() is the union of path()
    over the ids it finds (absent ids and ROOT add nothing)."""
    index = TreeIndex(NODES)
    assert index.rows_of([7, 99, 3]).tolist() == [2, -1, 0]
    assert index.ancestors({7, 4, 99}) == set(index.path(7)) | set(index.path(4))
    assert index.ancestors(()) == set()
    assert TreeIndex(()).rows_of([1]).tolist() == [-1]
    assert None not in index and 99 not in index and 2**70 not in index
    assert index.matches("#" + "9" * 25, limit=10) == []


def test_node_label_equals_the_assembled_label():
    """The browser's fast label has the text and styles of Rich's Text.assemble of the same
    parts: held and unheld nodes, a ref mismatch, no children, a namespace with a control
    code (sanitized in both)."""
    from kvctl.tui.widgets.tree.node_label import assembled_label, node_label

    views = [*NODES, node(8, 3, 2, 4_096)._replace(recorded_lock_ref=2, derived_lock_ref=1),
             node(6, 3, 2, 16, namespace="ns\x07bell")]
    for view in views:
        for children in (0, 3, 1_024):
            fast, plain = node_label(view, children), assembled_label(view, children)
            assert fast.plain == plain.plain and fast.spans == plain.spans, view


def test_the_largest_of_many_children_are_the_sorted_ones_and_pins_follow_in_tree_order():
    """Beyond the limit (the vectorized path): the shown children are exactly the first
    `limit` by (-tokens, node id), with many ties; pinned ones beyond it follow in the
    read's order, each once."""
    many = tuple(node(1_000 - i, ROOT, 1, 16 * (i % 7)) for i in range(300))
    index = TreeIndex(many)
    expected = sorted(many, key=lambda n: (-n.tokens, n.node_id))[:40]
    pinned = {many[5].node_id, many[250].node_id, many[3].node_id, expected[0].node_id}
    page = index.children(ROOT, limit=40, pinned=pinned)
    shown = [n.node_id for n in page.shown]
    assert shown[:40] == [n.node_id for n in expected]
    beyond = [n.node_id for n in many if n.node_id in pinned and n.node_id not in shown[:40]]
    assert shown[40:] == beyond and len(beyond) >= 2
    assert page.hidden == 300 - len(shown)

"""TreeNodes: a per-node read stored by column, read as a sequence of TreeNodeView rows."""

from __future__ import annotations

import gc
import pickle

import pytest

from engine_adapter.snapshot import TreeNodes, TreeNodeView
from support.telemetry_fixtures import seed_snapshot

pytestmark = pytest.mark.unit


def _view(node_id: int, parent: int | None, tokens: int, holders=()) -> TreeNodeView:
    return TreeNodeView(node_id=node_id, parent_id=parent, depth=1 if parent is None else 2,
                        tokens=tokens, pages=tokens // 16, recorded_lock_ref=len(holders),
                        derived_lock_ref=len(holders), holders=tuple(holders))


ROWS = (_view(3, None, 320, ["r1"]), _view(2, 3, 64, ["r1"]), _view(4, 3, 128))


def test_rows_round_trip_through_columns():
    """Columns of three rows give back the same rows, by index, slice and iteration."""
    nodes = TreeNodes.of(ROWS)
    assert len(nodes) == 3
    assert nodes.node_id == (3, 2, 4) and nodes.parent_id == (None, 3, 3)
    assert nodes.holders == (("r1",), ("r1",), ())
    assert nodes.medium == ("device", "device", "device")  # defaulted column
    assert tuple(nodes) == ROWS
    assert nodes[1] == ROWS[1] and nodes[-1] == ROWS[2]
    assert nodes[1:] == ROWS[1:]
    assert nodes == ROWS and nodes == TreeNodes.of(ROWS)
    assert nodes != ROWS[:2]


def test_snapshot_stores_rows_by_column():
    """A Snapshot given a tuple of rows keeps a TreeNodes equal to them."""
    snapshot = seed_snapshot(tree_nodes=ROWS)
    assert isinstance(snapshot.tree_nodes, TreeNodes)
    assert snapshot.tree_nodes == ROWS
    assert len(seed_snapshot().tree_nodes) == 0


def test_pickles_and_hashes_like_its_rows():
    """Snapshots cross process boundaries (sweeps): a pickled read equals the original."""
    nodes = TreeNodes.of(ROWS)
    again = pickle.loads(pickle.dumps(nodes))
    assert again == nodes and hash(again) == hash(nodes)


def test_is_immutable_and_checks_its_columns():
    """No attribute can be set; unknown, missing or ragged columns are refused."""
    nodes = TreeNodes.of(ROWS)
    with pytest.raises(AttributeError):
        nodes.tokens = (1, 2, 3)
    with pytest.raises(ValueError, match="unknown tree node columns: colour"):
        TreeNodes(node_id=(1,), colour=("red",))
    with pytest.raises(ValueError, match="'depth' is missing"):
        TreeNodes(node_id=(1,), parent_id=(None,))
    with pytest.raises(ValueError, match="'tokens' has 1 rows, node_id has 2"):
        TreeNodes(node_id=(1, 2), parent_id=(None, 1), depth=(1, 2), tokens=(16,),
                  pages=(1, 1), recorded_lock_ref=(0, 0), derived_lock_ref=(0, 0))


def test_a_large_read_leaves_nothing_for_the_garbage_collector():
    """The point of storing by column: after one collection a 50,000-node read holds no
    object the cyclic collector tracks except the TreeNodes itself, whereas the same rows
    as a tuple of views stay tracked one by one."""
    count = 50_000
    columns = dict(
        node_id=range(1, count + 1), parent_id=[None] + list(range(1, count)),
        depth=range(1, count + 1), tokens=[16] * count, pages=[1] * count,
        recorded_lock_ref=[0] * count, derived_lock_ref=[0] * count,
        holders=[(f"r{i % 7}",) for i in range(count)],
        namespace=[None] * count,
    )
    gc.collect()
    nodes = TreeNodes(**columns)
    gc.collect()
    tracked = [getattr(nodes, name) for name in columns if gc.is_tracked(getattr(nodes, name))]
    assert tracked == []
    assert not gc.is_tracked(nodes.holders[0])
    rows = tuple(nodes)
    gc.collect()
    assert sum(gc.is_tracked(row) for row in rows) == count

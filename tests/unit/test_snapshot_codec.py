"""The plugin's wire format: `decode_snapshot(encode_snapshot(s)) == s`, strict decoding,
and the schema-version check (engine_adapter/snapshot_codec.py)."""

from __future__ import annotations

import json
import math

import pytest

from engine_adapter.funnel import (
    REJECTION_REASONS,
    STAGES,
    Funnel,
    FunnelStage,
    PrefixLengths,
    Rejection,
)
from engine_adapter.snapshot import (
    Alert,
    Counters,
    EngineInfo,
    MappingLag,
    NodeRefCheck,
    PoolLedger,
    RefReconciliation,
    RequestView,
    Snapshot,
    TreeNodeView,
    TreeStats,
)
from engine_adapter.snapshot_codec import (
    SCHEMA_VERSION,
    SchemaMismatch,
    check_schema,
    decode_receipt,
    decode_snapshot,
    encode_receipt,
    encode_snapshot,
)
from engine_adapter.receipts import Receipt
from kvctl.errors import InputError

pytestmark = pytest.mark.unit


def _full_snapshot(**overrides) -> Snapshot:
    """A snapshot with every optional part filled and some `None`s where sources hide things."""
    funnel = Funnel(
        stages=tuple(FunnelStage(name=s, requests=None if i == 3 else 10 - i,
                                 tokens=None if i == 3 else 100 - i)
                     for i, s in enumerate(STAGES)),
        rejections=tuple(Rejection(reason=r, requests=i, tokens=None if i == 2 else i * 3)
                         for i, r in enumerate(REJECTION_REASONS)),
        lengths=PrefixLengths(prompt=400, semantic=None, indexed=300, cap=390, runtime=250),
    )
    fields = dict(
        seq=7,
        virtual_time_s=1.25,
        wall_time_s=1_700_000_000.5,
        info=EngineInfo(engine="plugin", tree_core="rust", page_size=16, eviction_policy="lru",
                        pool_tokens=4096, kv_pool="MHATokenToKVPool", sglang_version="0.5.23",
                        model="tiny", bytes_per_token=None),
        ledger=PoolLedger(page_size=16, pool_tokens=4096, free_tokens=1024, evictable_tokens=512,
                          used_tokens=2560, protected_tokens=2048, private_tokens=512,
                          private_filled_tokens=500, host_tokens=32, host_capacity_tokens=None),
        funnel=funnel,
        refs=RefReconciliation(leases=3, recorded_protected_tokens=2048,
                               derived_protected_tokens=2032, nodes_checked=9, per_node=True,
                               off_nodes=(NodeRefCheck(node_id=4, recorded=2, derived=1, tokens=16,
                                                       requests=("r1", "session:s9")),)),
        mapping=MappingLag(waiting_requests=1, lag_tokens=48, max_wait_seconds=0.003,
                           stalls_total=2, stall_seconds_total=0.01),
        counters=Counters(steps=None, requests_submitted=5, requests_finished=2,
                          prompt_tokens=400, hit_tokens=250, mapping_stall_seconds=math.inf,
                          allocation_failures=None),
        tree=TreeStats(nodes=9, cached_tokens=3000, max_depth_tokens=None, leaves=4,
                       tokens_by_medium=(("device", 2900), ("host", 100))),
        alerts=(Alert(name="ref_mismatch", severity="critical",
                      evidence="node 4: recorded 2, derived 1"),),
        requests=(RequestView(rid="r1", state="running", namespace="ns-ab12", prompt_tokens=64,
                              output_tokens=3, prefix_hit_tokens=48, retention="hold",
                              lease_node=4),
                  RequestView(rid="r2", state="waiting", namespace="default", prompt_tokens=32,
                              output_tokens=0, prefix_hit_tokens=0)),
        tree_nodes=(TreeNodeView(node_id=3, parent_id=None, depth=1, tokens=48, pages=3,
                                 recorded_lock_ref=1, derived_lock_ref=1, holders=("r1",),
                                 namespace="ns-ab12"),
                    TreeNodeView(node_id=4, parent_id=3, depth=2, tokens=16, pages=1,
                                 recorded_lock_ref=2, derived_lock_ref=1, medium="host")),
        connected=True,
        notes=("plugin: tree read 3 s old",),
    )
    fields.update(overrides)
    return Snapshot(**fields)


def test_round_trip_through_json_text_is_exact():
    """Every field, nested dataclass, None, tuple of tuples and tree column survive
    encode -> json text -> decode unchanged."""
    snap = _full_snapshot()
    text = json.dumps(encode_snapshot(snap), allow_nan=False)
    back = decode_snapshot(json.loads(text))
    assert back == snap
    assert back.tree_nodes.holders == (("r1",), ())
    assert back.refs.off_nodes[0].requests == ("r1", "session:s9")
    assert back.counters.steps is None and back.funnel.stages[3].requests is None


def test_round_trip_of_minimal_snapshot_keeps_defaults():
    """A snapshot with no alerts, requests, tree nodes or mapping decodes to an equal one."""
    snap = _full_snapshot(alerts=(), requests=(), tree_nodes=(), mapping=None, notes=())
    assert decode_snapshot(encode_snapshot(snap)) == snap


def test_non_finite_floats_are_spelled_as_strings():
    """JSON has no infinities: they travel as "Infinity"/"-Infinity"/"NaN", come back as floats."""
    snap = _full_snapshot(virtual_time_s=-math.inf, wall_time_s=math.nan)
    doc = encode_snapshot(snap)
    assert doc["virtual_time_s"] == "-Infinity"
    assert doc["wall_time_s"] == "NaN"
    assert doc["counters"]["mapping_stall_seconds"] == "Infinity"
    back = decode_snapshot(json.loads(json.dumps(doc, allow_nan=False)))
    assert back.virtual_time_s == -math.inf and math.isnan(back.wall_time_s)
    assert back.counters.mapping_stall_seconds == math.inf


def test_tree_nodes_travel_by_column():
    """`tree_nodes` is an object of equal-length columns, not a list of rows."""
    doc = encode_snapshot(_full_snapshot())
    assert doc["tree_nodes"]["node_id"] == [3, 4]
    assert doc["tree_nodes"]["parent_id"] == [None, 3]
    assert doc["tree_nodes"]["medium"] == ["device", "host"]


def test_wrong_type_names_the_field_path():
    """A string where an int belongs is refused with the path to it."""
    doc = encode_snapshot(_full_snapshot())
    doc["ledger"]["free_tokens"] = "12"
    with pytest.raises(InputError,
                       match=r"snapshot\.ledger\.free_tokens: expected int, got string"):
        decode_snapshot(doc)


def test_null_for_a_required_number_is_refused():
    """None is only accepted where the field may be unobservable."""
    doc = encode_snapshot(_full_snapshot())
    doc["ledger"]["pool_tokens"] = None
    with pytest.raises(InputError, match=r"snapshot\.ledger\.pool_tokens"):
        decode_snapshot(doc)


def test_bool_is_not_an_int():
    """JSON true is not accepted as a token count."""
    doc = encode_snapshot(_full_snapshot())
    doc["seq"] = True
    with pytest.raises(InputError, match=r"snapshot\.seq: expected int, got boolean"):
        decode_snapshot(doc)


def test_missing_required_field_is_refused_and_unknown_keys_ignored():
    """A field without a default must be present; an extra key from a newer writer is ignored."""
    doc = encode_snapshot(_full_snapshot())
    doc["a_future_field"] = 1
    assert decode_snapshot(doc) == _full_snapshot()
    del doc["ledger"]
    with pytest.raises(InputError, match=r"field 'ledger' is missing"):
        decode_snapshot(doc)


def test_ragged_tree_columns_are_refused():
    """Columns of different lengths are malformed input, not a crash."""
    doc = encode_snapshot(_full_snapshot())
    doc["tree_nodes"]["tokens"] = [48]
    with pytest.raises(InputError,
                       match=r"snapshot\.tree_nodes: tree node column 'tokens' has 1 rows"):
        decode_snapshot(doc)


def test_check_schema_accepts_own_version():
    """A document of this version passes."""
    check_schema({"schema_version": SCHEMA_VERSION, "snapshot": {}})


def test_check_schema_mismatch_names_both_versions():
    """Another version raises SchemaMismatch (an InputError) naming both numbers."""
    expected = rf"schema_version {SCHEMA_VERSION + 1} .*\({SCHEMA_VERSION}\)"
    with pytest.raises(SchemaMismatch, match=expected):
        check_schema({"schema_version": SCHEMA_VERSION + 1})
    assert issubclass(SchemaMismatch, InputError)


def test_check_schema_refuses_non_documents():
    """A list, or an object without an integer version, is not a plugin document."""
    with pytest.raises(InputError, match="not an object"):
        check_schema([1])
    with pytest.raises(InputError, match="no integer schema_version"):
        check_schema({"schema_version": "1"})


def test_receipt_round_trip():
    """A receipt (the items of /receipts) survives encode -> json -> decode unchanged."""
    receipt = Receipt(kind="match", start_s=0.25, end_s=0.25, tokens=48, outcome="hit",
                      namespace="ns-0123456789ab", request="r7")
    doc = json.loads(json.dumps(encode_receipt(receipt), allow_nan=False))
    assert doc["kind"] == "match" and doc["tokens"] == 48
    assert decode_receipt(doc) == receipt

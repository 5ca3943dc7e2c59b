"""sglang-router 0.3.2's routing policies and approximate tree (kvctl/fleet/routers).

Every expected value is derived by hand in a comment from the Rust rule it pins
(docs/fleet-router.md names the file and function of each)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvctl.errors import InputError, RuntimeFailure
from kvctl.fleet.routers.approx_tree import ApproxTree, common_prefix_len
from kvctl.fleet.routers.base import RouteRequest, RouterPolicy
from kvctl.fleet.routers.sglang_policies import (
    SGLANG_POLICIES,
    CacheAware,
    PowerOfTwo,
    Random,
    RoundRobin,
    input_ids_text,
)

pytestmark = pytest.mark.unit


def k(s: str) -> np.ndarray:
    """A text as tree keys: one int64 per character."""
    return np.array([ord(c) for c in s], dtype=np.int64)


def req(text: str = "", tokens=None, rid: str = "r") -> RouteRequest:
    """A text request (key = the text's characters), or with `tokens` an input_ids request:
    the ids the server receives are the key (the replica's own ids may differ: a trace's
    block ids expand to other ids, kvctl/fleet/keys.py)."""
    if tokens is not None:
        key = np.asarray(tokens, dtype=np.int64)
        return RouteRequest(rid=rid, key=key, tokens=key + 1_000_000, prompt_tokens=len(key),
                            arrival_s=0.0)
    key = k(text)
    return RouteRequest(rid=rid, key=key, tokens=key, prompt_tokens=len(key), arrival_s=0.0)


class View:
    """A FleetView with loads and health set by the test."""

    def __init__(self, replicas: int, loads=None, healthy=None):
        self.replicas = replicas
        self.load = list(loads) if loads is not None else [0] * replicas
        self.health = list(healthy) if healthy is not None else [True] * replicas

    def loads(self) -> list[int]:
        return list(self.load)

    def healthy(self) -> list[bool]:
        return list(self.health)

    def exact_hits(self, request):  # pragma: no cover - never read by these policies
        raise AssertionError("an sglang policy must not read the replicas' exact caches")


# -- the tree: insert, counts, splits --------------------------------------------------------


def test_common_prefix_len_short_long_and_mismatch_positions():
    a = np.arange(100)
    b = a.copy()
    assert common_prefix_len(a, b) == 100  # equal
    assert common_prefix_len(a[:10], b) == 10  # a is a prefix of b
    b[5] = -1
    assert common_prefix_len(a, b) == 5  # mismatch in the first 32 compared
    b = a.copy()
    b[70] = -1
    assert common_prefix_len(a, b) == 70  # mismatch after the head
    assert common_prefix_len(a[:0], b) == 0


def test_insert_splits_edges_and_counts_each_tenants_characters():
    t = ApproxTree()
    t.insert(k("hello"), 1)
    t.insert(k("help"), 2)
    # "hello"(1) then "help"(2): split at 3 -> "hel"{1,2} -> "lo"{1}, "p"{2}.
    # tenant 1 holds h,e,l,l,o = 5; tenant 2 joins "hel" (3) and creates "p" (1) = 4.
    assert t.tenant_char_count == {1: 5, 2: 4}
    assert t.used_size_per_tenant() == {1: 5, 2: 4}
    hel = t.root.children[ord("h")]
    assert "".join(map(chr, hel.text)) == "hel"
    assert sorted("".join(map(chr, c.text)) for c in hel.children.values()) == ["lo", "p"]
    assert t.node_count() == 3 and t.stored_chars() == 5 + 1  # "hel" + "lo" + "p"


def test_insert_of_a_prefix_splits_and_stamps_the_upper_half():
    t = ApproxTree()
    t.insert(k("abcdef"), 0)  # epoch 0 -> leaf "abcdef" {0: 0}
    t.insert(k("abc"), 1)  # split "abc"|"def"; text ends on "abc": stamp epoch 1 for tenant 1
    abc = t.root.children[ord("a")]
    assert "".join(map(chr, abc.text)) == "abc"
    # The upper half cloned tenant 0's time (0); tenant 1 joined and was stamped at the end.
    assert abc.tenants == {0: 0, 1: 1}
    assert t.tenant_char_count == {0: 6, 1: 3}


def test_reinserting_a_path_joins_intermediate_nodes_at_time_zero():
    t = ApproxTree()
    t.insert(k("ab"), 0)  # epoch 0: leaf "ab" {0:0}
    t.insert(k("abcd"), 0)  # "ab" full match (already on it), new leaf "cd" epoch 1
    t.insert(k("abcd"), 1)  # tenant 1 joins "ab" at time 0, "cd" at 0, end stamp epoch 2 on "cd"
    ab = t.root.children[ord("a")]
    cd = ab.children[ord("c")]
    assert ab.tenants == {0: 0, 1: 0}
    assert cd.tenants == {0: 1, 1: 2}
    assert t.tenant_char_count == {0: 4, 1: 4}


# -- the tree: prefix_match and its tie-break -------------------------------------------------


def test_prefix_match_answers_the_node_creator_not_the_latest_inserter():
    t = ApproxTree()
    t.insert(k("hello"), 3)  # creates "hello": last_tenant 3
    t.insert(k("hello"), 5)  # joins it (more recent), last_tenant stays 3
    assert t.prefix_match(k("hello")) == (5, 3)
    t.insert(k("help"), 5)  # split: "hel" inherits last_tenant 3; new leaf "p" created by 5
    assert t.prefix_match(k("hel")) == (3, 3)
    assert t.prefix_match(k("helpful")) == (4, 5)  # ends on "p" (created by 5), 4 matched


def test_prefix_match_partial_edge_selects_the_child_and_counts_its_shared_chars():
    t = ApproxTree()
    t.insert(k("xyz"), 0)
    t.insert(k("hello"), 1)
    # "help": 'h' child "hello", 3 shared < 5 -> stop on that child: matched 3, tenant 1.
    assert t.prefix_match(k("help")) == (3, 1)
    # No child for 'q': stop at the root, 0 matched.
    matched, _ = t.prefix_match(k("q"))
    assert matched == 0


def test_prefix_match_falls_back_to_smallest_tenant_when_the_creator_left_the_node():
    t = ApproxTree()
    t.insert(k("abc"), 2)  # creator 2
    t.insert(k("abc"), 0)
    t.insert(k("abc"), 1)
    t.remove_tenant(2)
    # Cached last_tenant 2 is gone from the node: Rust takes the DashMap's first key (hash
    # order); kvctl's documented stand-in is the smallest index, 0, and caches it.
    assert t.prefix_match(k("abc")) == (3, 0)
    assert t.root.children[ord("a")].last_tenant == 0


def test_prefix_match_stamps_the_node_on_every_eighth_epoch_only():
    t = ApproxTree()
    t.insert(k("ab"), 0)  # epoch 0 -> leaf {0: 0}
    node = t.root.children[ord("a")]
    for _ in range(7):  # epochs 1..7: 1 & 7 .. 7 & 7 are non-zero: no stamp
        t.prefix_match(k("ab"))
    assert node.tenants[0] == 0
    t.prefix_match(k("ab"))  # epoch 8: 8 & 7 == 0 -> stamp 8
    assert node.tenants[0] == 8
    assert t.epoch == 9


def test_empty_text_matches_nothing_at_the_root():
    t = ApproxTree()
    t.insert(k(""), 0)  # root gets tenant 0 with the end stamp (epoch 0), no characters
    assert t.tenant_char_count == {0: 0}
    assert t.prefix_match(k("")) == (0, 0)
    assert t.node_count() == 0


# -- the tree: LRU eviction by size ------------------------------------------------------------


def test_eviction_removes_the_oldest_leaves_and_keeps_the_most_recent():
    t = ApproxTree()
    t.insert(k("aaaa"), 0)  # epoch 0
    t.insert(k("bbbb"), 0)  # epoch 1
    t.insert(k("cccc"), 0)  # epoch 2; tenant 0 holds 12
    t.evict_tenant_by_size(8)
    # Oldest leaf "aaaa" (time 0) goes: 12 - 4 = 8 <= 8 stops. "bbbb", "cccc" stay.
    assert t.tenant_char_count == {0: 8}
    assert t.prefix_match(k("aaaa"))[0] == 0
    assert t.prefix_match(k("bbbb"))[0] == 4
    assert t.prefix_match(k("cccc"))[0] == 4


def test_eviction_uses_access_times_so_a_reinsert_refreshes_a_leaf():
    t = ApproxTree()
    t.insert(k("aaaa"), 0)  # epoch 0
    t.insert(k("bbbb"), 0)  # epoch 1
    t.insert(k("aaaa"), 0)  # ends on "aaaa": restamped epoch 2 -> "bbbb" is now the oldest
    t.evict_tenant_by_size(4)
    assert t.prefix_match(k("aaaa"))[0] == 4
    assert t.prefix_match(k("bbbb"))[0] == 0


def test_eviction_cascades_to_a_parent_that_becomes_a_leaf():
    t = ApproxTree()
    t.insert(k("abcd"), 0)  # leaf "abcd" epoch 0
    t.insert(k("abxy"), 0)  # split "ab"{0: 0 cloned} -> "cd"{0:0}, new leaf "xy"{0:1}
    assert t.tenant_char_count == {0: 6}
    t.evict_tenant_by_size(1)
    # heap: "cd"(0), "xy"(1). pop "cd": 6 > 1 -> 4, unlinked; "ab" still has "xy".
    # pop "xy": 4 > 1 -> 2, unlinked; "ab" is now a leaf for 0 -> pushed (time 0).
    # pop "ab": 2 > 1 -> 0, unlinked; the root becomes a leaf -> pushed; pop root: 0 <= 1.
    assert t.tenant_char_count == {0: 0}
    assert t.node_count() == 0
    assert 0 in t.root.tenants  # the root keeps its tenants


def test_eviction_only_touches_tenants_over_the_limit_and_keeps_shared_nodes():
    t = ApproxTree()
    t.insert(k("hello"), 0)  # epoch 0, creator 0
    t.insert(k("hello"), 1)  # joins, end stamp epoch 1
    t.insert(k("zzzzzz"), 0)  # epoch 2; tenant 0 holds 11, tenant 1 holds 5
    t.evict_tenant_by_size(6)
    # Leaves: "hello" for 0 (time 0) and for 1 (time 1), "zzzzzz" for 0 (time 2).
    # pop ("hello", 0): 11 > 6 -> drop 0 from "hello" (node stays: 1 is on it) -> 6.
    # pop ("hello", 1): 5 <= 6 skip. pop ("zzzzzz", 0): 6 <= 6 skip.
    assert t.tenant_char_count == {0: 6, 1: 5}
    assert t.prefix_match(k("hello")) == (5, 1)  # creator 0 left: fallback to smallest, 1
    assert t.prefix_match(k("zzzzzz"))[0] == 6


def test_eviction_under_the_limit_changes_nothing():
    t = ApproxTree()
    t.insert(k("abc"), 0)
    t.insert(k("abd"), 1)
    before = (t.tenant_char_count.copy(), t.node_count(), t.root.children[ord("a")].tenants.copy())
    t.evict_tenant_by_size(3)
    after = (t.tenant_char_count.copy(), t.node_count(), t.root.children[ord("a")].tenants.copy())
    assert before == after == ({0: 3, 1: 3}, 3, {0: 0, 1: 0})


def test_remove_tenant_drops_it_everywhere_and_unlinks_empty_nodes():
    t = ApproxTree()
    t.insert(k("apple"), 0)
    t.insert(k("apricot"), 1)
    t.remove_tenant(1)
    # "ap"{0,1} -> "ple"{0}, "ricot"{1}: "ricot" unlinked, "ap" keeps 0; 1 leaves the counts.
    assert t.tenant_char_count == {0: 5}
    assert t.used_size_per_tenant() == {0: 5}
    assert t.prefix_match(k("apricot")) == (2, 0)


def test_tree_rejects_keys_that_do_not_fit_its_storage():
    t = ApproxTree(np.int32)
    with pytest.raises(ValueError, match="do not fit"):
        t.insert(np.array([2**40]), 0)


# -- an independent brute-force reference ---------------------------------------------------


def _reference(ops: list[tuple[str, int]], query: str) -> tuple[int, int | None, dict]:
    """The tree's observable answers from plain strings, no tree at all:
    - matched = the longest common prefix of `query` with any inserted text;
    - tenant = the tenant of the FIRST inserted text that has query[:matched] as a prefix
      (it created the leaf holding that character; a split keeps the creator on both halves);
    - a tenant's count = how many distinct non-empty prefixes its texts have."""
    matched = max((len(os.path.commonprefix([query, s])) for s, _ in ops), default=0)
    tenant = None
    if matched:
        tenant = next(t for s, t in ops if s.startswith(query[:matched]))
    counts: dict[int, int] = {}
    for t in {t for _, t in ops}:
        prefixes = {s[:i] for s, tt in ops if tt == t for i in range(1, len(s) + 1)}
        counts[t] = len(prefixes)
    return matched, tenant, counts


_texts = st.text(alphabet="abc", min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(st.tuples(_texts, st.integers(0, 3)), min_size=1, max_size=25),
    queries=st.lists(_texts, min_size=1, max_size=6),
)
def test_tree_matches_a_brute_force_string_reference(ops, queries):
    t = ApproxTree()
    for s, tenant in ops:
        t.insert(k(s), tenant)
    for q in queries:
        matched, tenant, counts = _reference(ops, q)
        got_matched, got_tenant = t.prefix_match(k(q))
        assert got_matched == matched, (ops, q)
        if matched:
            assert got_tenant == tenant, (ops, q)
        assert t.tenant_char_count == counts
        assert t.used_size_per_tenant() == counts


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(st.tuples(_texts, st.integers(0, 3)), min_size=1, max_size=25),
    gone=st.integers(0, 3),
    queries=st.lists(_texts, min_size=1, max_size=6),
)
def test_remove_tenant_matches_the_reference_without_that_tenant(ops, gone, queries):
    t = ApproxTree()
    for s, tenant in ops:
        t.insert(k(s), tenant)
    t.remove_tenant(gone)
    kept = [(s, x) for s, x in ops if x != gone]
    for q in queries:
        matched, _, counts = _reference(kept, q)
        got_matched, got_tenant = t.prefix_match(k(q))
        assert got_matched == matched, (ops, gone, q)
        if matched:
            # The node's creator is the first text (of all, removed tenant included) with
            # that prefix; if it was the removed tenant, the fallback is the smallest tenant
            # still on the node: those with a kept text having that prefix.
            creator = next(x for s, x in ops if s.startswith(q[:matched]))
            if creator == gone:
                creator = min(x for s, x in kept if s.startswith(q[:matched]))
            assert got_tenant == creator, (ops, gone, q)
        assert {x: c for x, c in t.tenant_char_count.items()} == counts


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(st.tuples(_texts, st.integers(0, 2)), min_size=1, max_size=30),
    max_size=st.integers(0, 15),
)
def test_eviction_keeps_counts_exact_and_every_tenant_under_the_limit(ops, max_size):
    t = ApproxTree()
    for s, tenant in ops:
        t.insert(k(s), tenant)
    t.evict_tenant_by_size(max_size)
    used = t.used_size_per_tenant()
    # A tenant is listed by the walk while it is on any node (the root included).
    assert {x: c for x, c in t.tenant_char_count.items() if c} == {
        x: c for x, c in used.items() if c
    }
    assert all(c <= max_size for c in t.tenant_char_count.values())
    # What survives is still a prefix-closed set of inserted texts' prefixes.
    for s, _ in ops:
        matched, _ = t.prefix_match(k(s))
        assert 0 <= matched <= len(s)


# -- cache_aware --------------------------------------------------------------------------------


def test_cache_aware_defaults_are_sglang_router_0_3_2s():
    d = CacheAware().describe()
    # router_args.py RouterArgs: 0.3, 64, 1.5, 60 s, 2**26 (launch_router --help agrees).
    assert (
        d["cache_threshold"],
        d["balance_abs_threshold"],
        d["balance_rel_threshold"],
        d["eviction_interval_s"],
        d["max_tree_size"],
    ) == (0.3, 64, 1.5, 60, 67108864)
    assert d["name"] == "cache_aware" and d["request_text"] == "text"


def test_cache_aware_initialises_the_tree_with_every_worker_and_counts_epochs():
    p = CacheAware()
    p.select(req("abc"), View(3))
    # init_workers: insert("") per worker = 3 epochs (0..2); the request: a match (3) and
    # an insert creating a leaf (4) -> next epoch 5.
    assert set(p.tree.root.tenants) == {0, 1, 2}
    assert p.tree.epoch == 5


def test_match_rate_exactly_at_the_threshold_is_not_a_hit():
    p = CacheAware(cache_threshold=0.3)
    v = View(2, loads=[1, 0])
    assert p.select(req("abc"), v) == 1  # empty tree: rate 0 -> least loaded worker, 1
    v.load = [0, 0]
    # "abcdefghij": 3 of 10 matched: 3f/10f == f32(0.3), not > 0.3 -> min load, first: 0.
    assert p.select(req("abcdefghij"), v) == 0
    assert p.last.path == "min_load" and p.last.matched == 3 and p.last.tenant == 1


def test_match_rate_above_the_threshold_follows_the_tree():
    p = CacheAware(cache_threshold=0.3)
    v = View(2, loads=[1, 0])
    assert p.select(req("abcd"), v) == 1
    v.load = [0, 0]
    # 4 of 10 = 0.4 > 0.3 -> the tree's tenant 1, although worker 0 ties on load and is first.
    assert p.select(req("abcdefghij"), v) == 1
    assert p.last.path == "cache_hit"


def test_imbalance_needs_both_the_absolute_and_the_relative_condition():
    def routed(loads):
        p = CacheAware()  # abs 64, rel 1.5
        v = View(2, loads=[0, 1])
        p.select(req("prefix-" * 10), v)  # empty tree -> least loaded: worker 0 learns it
        v.load = loads
        return p.select(req("prefix-" * 10), v), p.last.path

    # [65, 0]: 65 - 0 > 64 and 65 > 0 * 1.5 -> imbalanced -> least loaded 1.
    assert routed([65, 0]) == (1, "imbalanced")
    # [64, 0]: 64 > 64 fails -> balanced -> full match on worker 0.
    assert routed([64, 0]) == (0, "cache_hit")
    # [300, 230]: 70 > 64 holds, 300 > 345 fails -> balanced -> worker 0.
    assert routed([300, 230]) == (0, "cache_hit")
    # [300, 199]: 101 > 64 and 300 > 298.5 -> imbalanced -> 1.
    assert routed([300, 199]) == (1, "imbalanced")


def test_imbalanced_requests_still_teach_the_tree():
    p = CacheAware()
    v = View(2, loads=[100, 0])  # imbalanced from the start
    assert p.select(req("hello world"), v) == 1
    assert p.tree.tenant_char_count[1] == 11  # inserted for the least-loaded worker
    v.load = [0, 0]
    assert p.select(req("hello world"), v) == 1  # and now the tree sends it back there


def test_min_load_ties_go_to_the_first_healthy_worker():
    p = CacheAware()
    v = View(4, loads=[3, 1, 1, 2])
    # Empty tree: rate 0 -> min_by_key over loads [3,1,1,2]: first minimum, worker 1.
    assert p.select(req("zzz"), v) == 1
    v.health = [True, False, True, True]
    # Healthy [0,2,3] loads [3,1,2] -> worker 2 ("yyy" shares nothing: rate 0).
    assert p.select(req("yyy"), v) == 2


def test_empty_text_always_goes_to_the_least_loaded_first_worker():
    p = CacheAware(request_text="empty")
    v = View(3)
    # Every request routes on "": rate 0 -> min load; all loads 0 -> worker 0, every time.
    assert [p.select(req(f"distinct text {i}"), v) for i in range(10)] == [0] * 10
    v.load = [1, 0, 0]
    assert p.select(req("x"), v) == 1


def test_input_ids_text_is_the_decimal_ids_joined_by_spaces():
    assert bytes(input_ids_text([1, 23, 456])) == b"1 23 456"
    assert bytes(input_ids_text([0, 10, 99, 100, 2147483647])) == b"0 10 99 100 2147483647"
    assert bytes(input_ids_text([-5, 7])) == b"-5 7"
    assert input_ids_text([]).size == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=50))
def test_input_ids_text_equals_pythons_join(ids):
    assert bytes(input_ids_text(np.array(ids))) == " ".join(map(str, ids)).encode()


def test_input_ids_requests_match_characters_of_the_decimal_text():
    p = CacheAware(request_text="input_ids")
    v = View(2, loads=[1, 0])
    assert p.select(req(tokens=[123, 5]), v) == 1  # "123 5" -> worker 1
    v.load = [0, 0]
    # [124, 5] is "124 5": shares "12" with "123 5" -> 2/5 = 0.4 > 0.3 -> worker 1, although
    # no token is shared (a token-level tree would match nothing).
    assert p.select(req(tokens=[124, 5]), v) == 1
    assert p.last.matched == 2 and p.last.text_chars == 5


def _groups(n_groups=4, per_group=10, total=39, seed=7):
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(1000, 150000, 300) for _ in range(n_groups)]
    out = []
    for i in range(total):
        g = i % n_groups
        ids = np.concatenate([prefixes[g], rng.integers(1000, 150000, 20)])
        out.append(RouteRequest(rid=str(i), key=ids, tokens=ids, prompt_tokens=len(ids),
                                arrival_s=float(i)))
    return out


def test_sequential_input_ids_requests_in_four_groups_all_land_on_one_worker():
    # The observed symptom: 39 input_ids-only requests in 4 prefix groups, one worker.
    # Sent one at a time, every load is 0 at each arrival; no imbalance (needs > 64 in
    # flight); a group's first request matches < 30% -> min load, first of ties: worker 0;
    # the rest of its group matches > 30% of its decimal text -> the tree's tenant: worker 0.
    p = CacheAware(request_text="input_ids")
    v = View(4)
    assert [p.select(r, v) for r in _groups()] == [0] * 39
    # Text requests routed the same way (loads all 0) land on worker 0 just the same.
    p = CacheAware(request_text="text")
    assert [p.select(r, v) for r in _groups()] == [0] * 39


def test_concurrent_input_ids_requests_spread_the_groups():
    # With every earlier request still in flight (loads = routed counts), each group's first
    # request finds worker 0 busier and goes to the least loaded: groups 0..3 -> workers 0..3;
    # later requests follow their group's worker (in-flight gaps stay under 64).
    p = CacheAware(request_text="input_ids")
    v = View(4)
    got = []
    for r in _groups():
        j = p.select(r, v)
        v.load[j] += 1
        got.append(j)
    assert got == [i % 4 for i in range(39)]


def test_a_matched_worker_that_is_unhealthy_is_dropped_from_the_tree():
    p = CacheAware()
    v = View(2, loads=[1, 0])
    assert p.select(req("abc"), v) == 1
    v.load = [0, 0]
    v.health = [False, True]
    assert p.select(req("zzz"), v) == 1  # only worker 1 is healthy
    v.health = [True, False]
    # "abc": rate 1 > 0.3 -> tenant 1, not available -> remove_tenant(1), first healthy: 0,
    # and nothing is inserted.
    assert p.select(req("abc"), v) == 0
    assert p.last.path == "stale_fallback"
    assert 1 not in p.tree.tenant_char_count and 1 not in p.tree.root.tenants
    assert p.tree.prefix_match(k("abc"))[0] == 0


def test_eviction_timer_runs_on_router_seconds():
    p = CacheAware(eviction_interval_s=60, max_tree_size=4)
    v = View(1)
    p.select(req("aaaa"), v)
    p.select(req("bbbb"), v)  # worker 0 holds 8 > 4
    p.tick(59.9)
    assert p.evictions == 0 and p.tree.tenant_char_count[0] == 8
    p.tick(60.0)  # first run at 1 * 60 s (PeriodicTask sleeps first)
    assert p.evictions == 1 and p.tree.tenant_char_count[0] == 4
    p.tick(119.0)
    assert p.evictions == 1
    p.tick(250.0)  # 120, 180, 240 passed: one run, next at 300
    assert p.evictions == 2
    p.tick(299.0)
    assert p.evictions == 2
    p.tick(300.0)
    assert p.evictions == 3


def test_no_healthy_replica_is_a_runtime_failure():
    for policy in (CacheAware(), RoundRobin(), Random(), PowerOfTwo()):
        with pytest.raises(RuntimeFailure, match="no healthy replica"):
            policy.select(req("a"), View(2, healthy=[False, False]))


# -- round_robin, random, power_of_two ---------------------------------------------------------


def test_round_robin_cycles_over_healthy_workers_with_one_counter():
    p = RoundRobin()
    v = View(3)
    assert [p.select(req(), v) for _ in range(4)] == [0, 1, 2, 0]  # counts 0..3 mod 3
    v.health = [True, False, True]
    # counts 4, 5, 6 mod 2 over healthy [0, 2] -> 0, 2, 0
    assert [p.select(req(), v) for _ in range(3)] == [0, 2, 0]


def test_random_is_reproducible_for_its_seed_and_picks_healthy_workers():
    v = View(4, healthy=[True, False, True, True])
    a = [Random(seed=3).select(req(), v) for _ in range(1)]
    p, q = Random(seed=3), Random(seed=3)
    seq_p = [p.select(req(), v) for _ in range(50)]
    seq_q = [q.select(req(), v) for _ in range(50)]
    assert seq_p == seq_q and seq_p[0] == a[0]
    assert set(seq_p) <= {0, 2, 3} and len(set(seq_p)) == 3
    r = Random(seed=4)
    assert [r.select(req(), v) for _ in range(50)] != seq_p


class _ScriptedRng:
    def __init__(self, draws):
        self.draws = list(draws)
        self.calls = []

    def integers(self, low, high):
        self.calls.append((low, high))
        return self.draws.pop(0)


def test_power_of_two_draws_two_distinct_workers_and_keeps_the_first_on_ties():
    p = PowerOfTwo()
    p._rng = _ScriptedRng([2, 1])
    # n = 4: i1 = 2; i2 = (2 + 1 + 1) % 4 = 0. No poll: both loads 0 -> load1 <= load2 -> 2.
    assert p.select(req(), View(4, loads=[0, 9, 9, 9])) == 2
    assert p._rng.calls == [(0, 4), (0, 3)]


def test_power_of_two_ignores_the_router_count_and_compares_polled_token_loads():
    polls = []

    def poll(t):
        polls.append(t)
        return [5, 0, 9, 0]

    p = PowerOfTwo(load_check_interval_s=30, poll_loads=poll)
    p.tick(0.0)  # first poll at router start
    p._rng = _ScriptedRng([2, 1])
    # candidates 2 (9 tokens) and 0 (5 tokens): 9 <= 5 fails -> 0.
    assert p.select(req(), View(4)) == 0
    p.tick(29.0)
    p.tick(30.0)
    p.tick(95.0)  # 60 and 90 passed: one poll, at 90
    assert polls == [0.0, 30.0, 90.0]


def test_power_of_two_with_a_single_healthy_worker_draws_nothing():
    p = PowerOfTwo()
    p._rng = _ScriptedRng([])
    assert p.select(req(), View(3, healthy=[False, False, True])) == 2


def test_policy_names_are_sglangs():
    assert {name: cls.name for name, cls in SGLANG_POLICIES.items()} == {
        "round_robin": "round_robin",
        "random": "random",
        "power_of_two": "power_of_two",
        "cache_aware": "cache_aware",
    }
    assert all(issubclass(cls, RouterPolicy) for cls in SGLANG_POLICIES.values())


# -- bad options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "option"),
    [
        (lambda: CacheAware(cache_threshold=-0.1), "--cache-threshold"),
        (lambda: CacheAware(cache_threshold=1.01), "--cache-threshold"),
        (lambda: CacheAware(cache_threshold=float("nan")), "--cache-threshold"),
        (lambda: CacheAware(cache_threshold="0.3"), "--cache-threshold"),
        (lambda: CacheAware(cache_threshold=True), "--cache-threshold"),
        (lambda: CacheAware(balance_abs_threshold=-1), "--balance-abs-threshold"),
        (lambda: CacheAware(balance_abs_threshold=1.5), "--balance-abs-threshold"),
        (lambda: CacheAware(balance_rel_threshold=0.99), "--balance-rel-threshold"),
        (lambda: CacheAware(balance_rel_threshold=float("inf")), "--balance-rel-threshold"),
        (lambda: CacheAware(eviction_interval_s=0), "--eviction-interval-secs"),
        (lambda: CacheAware(eviction_interval_s=-5), "--eviction-interval-secs"),
        (lambda: CacheAware(max_tree_size=0), "--max-tree-size"),
        (lambda: CacheAware(max_tree_size=2.0), "--max-tree-size"),
        (lambda: CacheAware(request_text="tokens"), "request_text"),
        (lambda: Random(seed=-1), "seed"),
        (lambda: Random(seed=1.5), "seed"),
        (lambda: PowerOfTwo(seed=-2), "seed"),
        (lambda: PowerOfTwo(load_check_interval_s=0), "--worker-startup-check-interval"),
        (lambda: PowerOfTwo(poll_loads=3), "poll_loads"),
    ],
)
def test_bad_options_fail_with_one_line_naming_the_option(make, option):
    with pytest.raises(InputError) as e:
        make()
    msg = str(e.value)
    assert option in msg and "\n" not in msg


def test_edge_options_are_accepted():
    # The Rust ranges are inclusive: 0.0 and 1.0 thresholds, rel 1.0, abs 0.
    CacheAware(cache_threshold=0.0, balance_rel_threshold=1.0, balance_abs_threshold=0)
    CacheAware(cache_threshold=1.0)

"""The plugin's HiCache reader against SGLang's real HiCache objects, built on this CPU.

The stack is SGLang 0.5.23's own (`UnifiedRadixCache.init_hicache`, `HybridCacheController`,
`MHATokenToKVPoolHost`, the Rust or Python tree core) with the CPU test platform's stack
strategy (tests/integration/hicache_support.py); it is driven with the calls SGLang's
scheduler makes. Geometry: 256-token device pool, page 4, ratio 2 -> a host pool of
129 pages = 516 slots; the tiny Llama's KV is 2 layers x (K+V) x 2 heads x 16 dims x
4 bytes = 512 bytes per token, so 16 tokens move 8,192 bytes.
"""

from __future__ import annotations

import pytest

from engine_adapter.plugin.hicache_reader import HiCacheReader
from tests.integration.hicache_support import (
    build_hicache_cache,
    evict,
    insert,
    node_read,
    settle,
    start_load_back,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMPT = list(range(1, 17))  # 16 tokens = 4 pages


@pytest.fixture(params=["rust", "python"])
def stack(request):
    return build_hicache_cache(tree_core=request.param)


@pytest.fixture
def reader(stack):
    errors: list[Exception] = []
    found = HiCacheReader.attach(stack.cache, errors.append)
    yield found
    assert errors == []  # no probe or read failed during the test


def test_cache_without_hicache_has_no_reader():
    """A UnifiedRadixCache without init_hicache has no host tier: attach returns None."""
    plain = build_hicache_cache(hicache=False)
    assert HiCacheReader.attach(plain.cache, lambda exc: None) is None


def test_empty_host_pool_ledger(stack, reader):
    """Before any traffic: 516 slots, all free, no host copies, residual 0."""
    host = reader.ledger(node_read(stack.cache))
    assert (host.capacity_tokens, host.free_tokens, host.used_tokens) == (516, 516, 0)
    assert (host.tree_tokens, host.protected_tokens, host.residual_tokens) == (0, 0, 0)
    assert host.write_policy == "write_through"


def test_write_through_is_pending_until_sglang_acks_it(stack, reader):
    """An insert issues a backup: one pending write, host slots taken, nothing written yet."""
    insert(stack, PROMPT)
    io = reader.io()
    assert (io.pending_writes, io.written_tokens) == (1, 0)
    assert reader.ledger(None).used_tokens == 16


def test_acked_write_counts_sglang_token_and_byte_totals(stack, reader):
    """After SGLang processes the ack: 16 tokens, 8,192 bytes written, nothing pending."""
    insert(stack, PROMPT)
    settle(stack)
    io = reader.io()
    assert (io.written_tokens, io.written_bytes, io.pending_writes) == (16, 8192, 0)


def test_host_ledger_balances_after_write_and_device_eviction(stack, reader):
    """The host copy outlives the device copy: 16 slots held by the tree, evictable, residual 0."""
    insert(stack, PROMPT)
    settle(stack)
    assert evict(stack, 16) == 16
    host = reader.ledger(node_read(stack.cache))
    assert (host.free_tokens, host.tree_tokens, host.evictable_tokens) == (500, 16, 16)
    assert (host.protected_tokens, host.residual_tokens) == (0, 0)


def test_load_back_pins_the_host_path_until_acked(stack, reader):
    """An issued load-back host-locks the node: protected 16, one pending load, 0 loaded."""
    insert(stack, PROMPT)
    settle(stack)
    evict(stack, 16)
    assert start_load_back(stack, PROMPT) == 16
    host, io = reader.ledger(node_read(stack.cache)), reader.io()
    assert (host.protected_tokens, host.evictable_tokens, host.residual_tokens) == (16, 0, 0)
    assert (io.pending_loads, io.loaded_tokens) == (1, 0)


def test_acked_load_back_counts_loaded_tokens_and_unpins(stack, reader):
    """After SGLang's loading_check: 16 tokens and 8,192 bytes loaded, the host copy evictable."""
    insert(stack, PROMPT)
    settle(stack)
    evict(stack, 16)
    start_load_back(stack, PROMPT)
    settle(stack)
    host, io = reader.ledger(node_read(stack.cache)), reader.io()
    assert (io.loaded_tokens, io.loaded_bytes, io.pending_loads) == (16, 8192, 0)
    assert (host.protected_tokens, host.evictable_tokens) == (0, 16)


def test_host_slots_held_by_no_node_show_as_residual(stack, reader):
    """Slots taken from the host pool outside the tree (a leak) appear in the residual."""
    insert(stack, PROMPT)
    settle(stack)
    stack.host_pool.alloc(8)
    host = reader.ledger(node_read(stack.cache))
    assert (host.used_tokens, host.tree_tokens, host.residual_tokens) == (24, 16, 8)


def test_write_back_keeps_a_new_node_on_device_only():
    """Under write_back nothing is copied on insert: the node's 16 tokens are not host copies."""
    stack = build_hicache_cache(write_policy="write_back")
    reader = HiCacheReader.attach(stack.cache, lambda exc: None)
    insert(stack, PROMPT)
    settle(stack)
    nodes = node_read(stack.cache)
    host = reader.ledger(nodes)
    assert sum(nodes.tokens) == 16
    assert (host.write_policy, host.used_tokens, host.tree_tokens, host.residual_tokens) == (
        "write_back", 0, 0, 0)


def test_tree_terms_are_not_observable_without_a_node_read(stack, reader):
    """Between per-node reads the tree terms are None, never a stale or zero number."""
    insert(stack, PROMPT)
    settle(stack)
    host = reader.ledger(None)
    assert host.used_tokens == 16
    assert (host.tree_tokens, host.evictable_tokens, host.residual_tokens) == (None, None, None)


def _runtime(stack):
    """The plugin's runtime on a scheduler-shaped holder of the stack (no requests running)."""
    from types import SimpleNamespace

    from engine_adapter.plugin.attach import engine_info
    from engine_adapter.plugin.runtime import PluginRuntime
    from engine_adapter.plugin.settings import PluginSettings

    scheduler = SimpleNamespace(
        tree_cache=stack.cache, token_to_kv_pool_allocator=stack.allocator,
        running_batch=SimpleNamespace(reqs=[]), last_batch=None, cur_batch_for_debug=None,
        chunked_req=None, waiting_queue=[], server_args=None)
    return PluginRuntime(scheduler, PluginSettings.from_env({}), dp_rank=0,
                         info=engine_info(scheduler))


def test_plugin_snapshot_carries_the_host_tier_through_the_wire_format(stack):
    """The plugin runtime's sample has the host ledger and transfers; /snapshot's JSON keeps
    them."""
    from engine_adapter.snapshot_codec import decode_snapshot, encode_snapshot

    runtime = _runtime(stack)
    insert(stack, PROMPT)
    settle(stack)
    snap = runtime.sample(None, per_node=True, now=1.0)
    assert (snap.ledger.host_tokens, snap.ledger.host_capacity_tokens) == (16, 516)
    assert (snap.ledger.host.tree_tokens, snap.ledger.host.residual_tokens) == (16, 0)
    assert (snap.hicache.written_tokens, snap.hicache.pending_writes) == (16, 0)
    assert dict(snap.tree.tokens_by_medium)["host"] == 16
    assert decode_snapshot(encode_snapshot(snap)) == snap


def test_plugin_snapshot_without_hicache_has_no_host_tier():
    """A server without HiCache: no host ledger, no HiCache transfers in the snapshot."""
    snap = _runtime(build_hicache_cache(hicache=False)).sample(None, per_node=True, now=1.0)
    assert (snap.ledger.host, snap.hicache) == (None, None)


def test_plugin_counts_an_inflight_load_back_lock_as_a_lease(stack):
    """Between a load-back and its ack SGLang holds a tree lock no request owns: the
    plugin's sample counts it as a lease (hicache-load:ACK), so the per-node reconciliation
    finds no node off and derived protected tokens equal recorded (16)."""
    runtime = _runtime(stack)
    insert(stack, PROMPT)
    settle(stack)
    evict(stack, 16)
    start_load_back(stack, PROMPT)
    snap = runtime.sample(None, per_node=True, now=1.0)
    assert snap.refs.leases == 1 and snap.refs.off_nodes == ()
    assert snap.refs.derived_protected_tokens == snap.refs.recorded_protected_tokens == 16

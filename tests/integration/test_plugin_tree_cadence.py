"""The plugin's two cadences on SGLang's real tree (no HiCache): a ledger sample every
KVCTL_PLUGIN_LEDGER_S, a per-node tree read only every KVCTL_PLUGIN_TREE_S; in between, a
sample carries the last per-node read and says how old it is. The e2e plugin server samples
with both periods equal, so this is where the carried read is checked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.integration.hicache_support import build_hicache_cache, insert

pytestmark = pytest.mark.integration


def _runtime(stack, clock):
    from engine_adapter.plugin.attach import engine_info
    from engine_adapter.plugin.runtime import PluginRuntime
    from engine_adapter.plugin.settings import PluginSettings

    scheduler = SimpleNamespace(
        tree_cache=stack.cache, token_to_kv_pool_allocator=stack.allocator,
        running_batch=SimpleNamespace(reqs=[]), last_batch=None, cur_batch_for_debug=None,
        chunked_req=None, waiting_queue=[], server_args=None)
    settings = PluginSettings.from_env({"KVCTL_PLUGIN_LEDGER_S": "0.2",
                                        "KVCTL_PLUGIN_TREE_S": "1.0"})
    return PluginRuntime(scheduler, settings, dp_rank=0, info=engine_info(scheduler),
                         clock=clock)


def test_samples_between_tree_reads_carry_the_last_read_and_its_age():
    """Samples at 0.0, 0.3, 0.6, 1.1 s (ledger 0.2 s, tree 1.0 s): per-node reads at 0.0 and
    1.1 only; the 0.3 and 0.6 samples carry the 0.0 read's node list, are noted 0.3 s and
    0.6 s old, and still count the tree's tokens of their own moment (16 inserted at 0.5)."""
    now = [0.0]
    stack = build_hicache_cache(hicache=False)
    runtime = _runtime(stack, lambda: now[0])
    seen = []
    for at in (0.0, 0.3, 0.6, 1.1):
        now[0] = at
        if at == 0.6:
            insert(stack, list(range(1, 17)))
        runtime.maybe_sample(None)
        snap = runtime.latest
        seen.append((snap.refs.nodes_checked, snap.tree.cached_tokens,
                     [n for n in snap.notes if n.startswith("tree:")]))
    assert seen[0][0] is not None and seen[3][0] is not None
    assert (seen[1][0], seen[2][0]) == (None, None)
    assert seen[1][2] == ["tree: per-node read 0.3 s old"]
    assert seen[2][2] == ["tree: per-node read 0.6 s old"]
    assert [s[1] for s in seen] == [0, 0, 16, 16]
    assert seen[3][2] == []

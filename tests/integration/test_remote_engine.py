"""RemoteEngine against a loopback SGLang: real cache, publisher, metrics and server info.

The loopback (tests/support/loopback.py) serves what SGLang's own code produces:
`/metrics` rendered by prometheus_client from SGLang's SchedulerMetricsCollector (fed by
SchedulerPoolStatsObserver), TokenizerMetricsCollector and the cache's
RadixCacheMetricsCollector; `/server_info` from `build_server_info` plus the fields
`http_server.server_info` adds (version, startup_time, internal_states). Expected values
are read from SGLang's allocator and tree directly.
"""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from engine_adapter.protocol import SnapshotSource
from support.fault_relay import FaultRelay
from remote_support import PAGE, TINY, prompt
from support.loopback_http import LoopbackHttp
from engine_adapter.remote.reconcile import DriftTolerance
from engine_adapter.remote.remote_engine import RemoteEngine
from kvctl.cli.app import app
from kvctl.errors import InputError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(loopback_cls):
    srv = loopback_cls(page_size=PAGE, pool_tokens=256, model_dir=TINY, metrics=True)
    yield srv
    srv.close()


@pytest.fixture
def idle(server):
    server.release_all()
    server.flush()
    if not server.http.running:
        server.http.start()
    return server


def caught_up(engine, server, timeout=10.0) -> bool:
    return engine.stream.wait_until(lambda s: s.next_seq >= server.batches_published, timeout)


@pytest.fixture
def engine(idle):
    eng = RemoteEngine(idle.url, resync_interval_s=0.2)
    assert eng.wait_for_events(10)
    assert caught_up(eng, idle)
    yield eng
    eng.close()


def test_ledger_equals_sglang_pool(idle, engine):
    """free, evictable, used and pool come from SGLang's own gauges and match its objects.

    Pinned from the requests alone: a 256-token pool, 3 + 2 pages of 4 cached and nothing
    running, so evictable = 20, free = 256 - 20 = 236, used = 0."""
    idle.serve(prompt(3 * PAGE))
    idle.serve(prompt(2 * PAGE))
    assert caught_up(engine, idle)
    ledger = engine.snapshot().ledger
    reading = (ledger.pool_tokens, ledger.free_tokens, ledger.evictable_tokens,
               ledger.used_tokens)
    assert reading == (256, 236, 20, 0)
    assert reading == (
        idle.allocator.size, idle.allocator.available_size(), idle.cache.evictable_size(), 0
    )
    assert (ledger.evictable_tokens, ledger.protected_tokens, ledger.private_tokens) == (
        20,
        None,
        None,
    )


def test_engine_info_and_contract(idle, engine):
    """EngineInfo says remote; refs are not observable; the snapshot is connected."""
    snapshot = engine.snapshot()
    info = snapshot.info
    assert (
        info.engine,
        info.tree_core,
        info.kv_pool,
        info.page_size,
        info.sglang_version,
        info.eviction_policy,
    ) == ("remote", "remote", "remote", PAGE, "0.5.23", "lru")
    assert (snapshot.connected, snapshot.refs.per_node, snapshot.refs.ok) == (True, False, None)


def test_mirror_matches_evictable_when_idle(idle, engine):
    """Nothing locked: the mirror's GPU tokens equal kv_evictable_tokens; no drift, no alert."""
    system = prompt(2 * PAGE)
    for _ in range(3):
        idle.serve(prompt(PAGE, prefix=system))
    assert caught_up(engine, idle)
    read = engine.read()
    tree = read.snapshot.tree
    assert (read.shape.blocks, tree.cached_tokens, tree.tokens_by_medium, tree.nodes) == (
        5,
        20,
        (("device", 20),),
        None,
    )
    assert read.reconciliation.drift_tokens == 0 and read.snapshot.alerts == ()
    assert (read.shape.max_shared_prefix_tokens, read.shape.max_fan_out) == (8, 3)


def test_locked_and_private_tokens_stay_inside_the_band(idle, engine):
    """A running request locks 12 tree tokens and holds 8 private slots: used = 20 =
    protected + private (SGLang's own sizes), and the mirror (24 slots) sits in
    [evictable 12, evictable + used 32]."""
    idle.serve(prompt(3 * PAGE))
    idle.serve(prompt(3 * PAGE), hold=True)
    idle.hold_private(2 * PAGE)
    assert caught_up(engine, idle)
    read = engine.read()
    ledger = read.snapshot.ledger
    assert ledger.used_tokens == idle.cache.protected_size() + 2 * PAGE == 20
    rec = read.reconciliation
    assert (rec.mirror_slots, rec.lower_tokens, rec.upper_tokens, rec.drift_tokens) == (
        24,
        12,
        32,
        0,
    )


def test_counters_follow_sglang_collectors(idle, engine):
    """Finished requests, prompt and cached tokens move by what the loopback served."""
    before = engine.snapshot().counters
    tokens = prompt(4 * PAGE)
    idle.serve(tokens)
    second = idle.serve(tokens + prompt(PAGE), output_tokens=3)
    after = engine.snapshot().counters
    assert (
        after.requests_finished - before.requests_finished,
        after.prompt_tokens - before.prompt_tokens,
        after.hit_tokens - before.hit_tokens,
        after.decode_tokens - before.decode_tokens,
    ) == (2, 36, 16, 3)
    assert second.matched_tokens == 16


def test_eviction_counter_comes_from_the_cache_collector(idle, engine):
    """sglang:evicted_tokens_total (the cache's RadixCacheMetricsCollector) moves by what
    UnifiedRadixCache.evict freed."""
    before = engine.snapshot().counters.evicted_tokens
    idle.serve(prompt(2 * PAGE))
    freed = idle.evict(PAGE)
    assert engine.snapshot().counters.evicted_tokens - before == freed == 2 * PAGE


def test_hit_rate_is_cached_over_prompt(idle, engine):
    """seed 003 eq. (2): H_prefix = cached / prompt tokens. Served here: an 8-token prompt
    (nothing cached), then it again plus 8 new tokens (its 8 cached): 24 prompt tokens,
    8 cached, added to what the server had counted before."""
    before = engine.snapshot().counters
    tokens = prompt(2 * PAGE)
    idle.serve(tokens)
    idle.serve(tokens + prompt(2 * PAGE))
    after = engine.snapshot()
    assert (after.counters.prompt_tokens - before.prompt_tokens,
            after.counters.hit_tokens - before.hit_tokens) == (24, 8)
    assert after.hit_rate == pytest.approx((before.hit_tokens + 8) / (before.prompt_tokens + 24))


def test_lost_events_raise_drift_alert(idle):
    """Events dropped with no replay (its socket unreachable) leave the mirror 12 tokens
    short: kv_event_batches_lost at once, remote_reconciliation_drift on the 2nd read."""
    relay = FaultRelay(idle.kv_endpoint)
    engine = RemoteEngine(
        idle.url,
        kv_events=relay.endpoint,
        kv_replay="tcp://127.0.0.1:9",
        replay_timeout_s=0.3,
        tolerance=DriftTolerance(pages=0, pool_fraction=0.0, consecutive_reads=2),
    )
    try:
        engine.wait_for_events(10)
        for _ in range(50):  # until a live message crossed the relay
            idle.serve(prompt(PAGE))
            if engine.stream.stats().live_messages:
                break
            time.sleep(0.05)
        idle.flush()  # AllBlocksCleared: the mirror is exact again
        assert caught_up(engine, idle) and engine.stream.stats().mirror_complete
        relay.drop.add(idle.batches_published)
        idle.serve(prompt(3 * PAGE))
        idle.serve(prompt(PAGE))
        assert caught_up(engine, idle)
        first, second = engine.read(), engine.read()
        assert [a.name for a in first.snapshot.alerts] == ["kv_event_batches_lost"]
        assert [a.name for a in second.snapshot.alerts] == [
            "remote_reconciliation_drift",
            "kv_event_batches_lost",
        ]
        assert second.reconciliation.drift_tokens == -3 * PAGE
    finally:
        engine.close()
        relay.close()


def test_server_down_then_back(idle, engine):
    """HTTP goes away: the read says disconnected with the last numbers and an alert, the
    next attempt waits for the backoff; when the port answers again the engine reconnects."""
    good = engine.snapshot()
    idle.http.stop()
    down = engine.read()
    assert (down.snapshot.connected, down.snapshot.ledger) == (False, good.ledger)
    assert [a.name for a in down.snapshot.alerts] == ["remote_server_unreachable"]
    assert down.retry_in_s > 0 and engine.read().retry_in_s > 0
    idle.http.start()
    deadline = time.monotonic() + 15
    while not engine.read().snapshot.connected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.snapshot().connected


def test_malformed_metric_line_is_counted_and_skipped(idle):
    """One garbage line appended to SGLang's exposition: counted, reported as an alert, and
    the pool gauges around it still read."""

    def metrics():
        body, content_type = idle._render_metrics()
        return body + b"sglang:kv_used_tokens{broken 1\n", content_type

    http = LoopbackHttp(metrics=metrics, info=idle._server_info)
    engine = RemoteEngine(http.url, events=False)
    try:
        read = engine.read()
        assert (read.snapshot.connected, read.malformed_metric_lines) == (True, 1)
        assert read.snapshot.ledger.free_tokens == idle.allocator.available_size()
        assert [a.name for a in read.snapshot.alerts] == ["remote_malformed_input"]
    finally:
        engine.close()
        http.close()


def test_malformed_server_info_is_counted_not_fatal(idle):
    """A server-info reply without a usable page_size: disconnected, counted, no crash."""
    http = LoopbackHttp(metrics=idle._render_metrics, info=lambda: {"page_size": "four"})
    engine = RemoteEngine(http.url, events=False)
    try:
        read = engine.read()
        assert (read.snapshot.connected, read.malformed_server_info) == (False, 1)
        assert "page_size" in read.last_error
    finally:
        engine.close()
        http.close()


def test_deprecated_get_server_info_is_the_fallback(idle):
    """A server that only answers /get_server_info is still read."""
    http = LoopbackHttp(
        metrics=idle._render_metrics, info=idle._server_info, info_paths=("/get_server_info",)
    )
    engine = RemoteEngine(http.url, events=False)
    try:
        read = engine.read()
        assert (read.snapshot.connected, read.info.source_path) == (True, "/get_server_info")
    finally:
        engine.close()
        http.close()


def test_server_restart_resyncs_the_mirror(idle):
    """A new startup_time in /server_info: the engine asks the stream to rebuild, and the
    mirror equals the restarted server's tree."""
    engine = RemoteEngine(idle.url, info_refresh_s=0.0, resync_interval_s=0.2)
    try:
        assert engine.wait_for_events(10)
        idle.serve(prompt(2 * PAGE))
        assert caught_up(engine, idle)
        idle.restart()
        idle.serve(prompt(3 * PAGE))
        engine.read()  # sees the new startup_time and asks the stream thread to resync
        assert engine.stream.wait_until(lambda s: s.resyncs == 1, timeout=10)
        assert caught_up(engine, idle)
        assert engine.stream.wait_until(
            lambda s: engine.stream.hashes() == idle.resident_block_hashes(), timeout=10
        )
    finally:
        engine.close()


def test_remote_engine_is_a_read_only_snapshot_source(idle):
    """It satisfies SnapshotSource, has no receipts, refuses control, closes twice."""
    engine = RemoteEngine(idle.url, events=False)
    assert isinstance(engine, SnapshotSource) and engine.take_receipts() == []
    with pytest.raises(InputError):
        engine.flush_cache()
    engine.close()
    engine.close()


def test_cli_json_is_the_snapshot(idle, engine):
    """`kvctl inspect --url U --json`: exit 0, the ledger equals SGLang's, events mirrored:
    one 12-token prompt (3 pages) in a 256-token pool leaves 244 free."""
    idle.serve(prompt(3 * PAGE))
    assert caught_up(engine, idle)
    result = CliRunner().invoke(app, ["inspect", "--url", idle.url, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["snapshot"]["info"]["engine"] == "remote"
    assert document["snapshot"]["ledger"]["free_tokens"] == 244 == idle.allocator.available_size()
    assert (document["mirror"]["blocks"], document["reconciliation"]["drift_tokens"]) == (3, 0)


def test_cli_table_marks_not_observable(idle):
    """The table view names the worker and says what is not observable."""
    result = CliRunner().invoke(app, ["inspect", "--url", idle.url])
    assert result.exit_code == 0, result.output
    assert idle.url in result.output and "not observable" in result.output


def test_cli_routes_a_prompt_to_its_cached_prefix(idle, engine, tmp_path):
    """--prompt-file on one worker: the cached 12 tokens of a 14-token prompt are found."""
    tokens = prompt(3 * PAGE)
    idle.serve(tokens)
    assert caught_up(engine, idle)
    path = tmp_path / "prompt.json"
    path.write_text(json.dumps({"token_ids": tokens + [7, 8]}))
    result = CliRunner().invoke(
        app, ["inspect", "--url", idle.url, "--prompt-file", str(path), "--json"]
    )
    assert result.exit_code == 0, result.output
    route = json.loads(result.output)["route"]
    assert (
        route["winner"],
        route["scores"][0]["matched_tokens"],
        route["novel_suffix_tokens"],
    ) == (idle.url, 12, 2)

"""The Prometheus collector over real Snapshot objects: exact sample values, seed numbers."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from engine_adapter.funnel import FunnelStage
from engine_adapter.snapshot import Alert, RefReconciliation, RequestView, Snapshot
from telemetry.collector import SnapshotCollector
from telemetry.hygiene import NamespaceLabeler
from telemetry.metrics_table import METRICS
from support.telemetry_fixtures import FixedSnapshotSource, seed_snapshot

pytestmark = pytest.mark.unit


def _registry(*snapshots: Snapshot, labeler: NamespaceLabeler | None = None):
    registry = CollectorRegistry()
    source = FixedSnapshotSource(snapshots or (seed_snapshot(),))
    SnapshotCollector(source, registry=registry,
                      labeler=labeler or NamespaceLabeler(salt=b"test-salt"))
    return registry, source


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_pool_partition_matches_seed_000_0x0CF_ledger():
    """seed 000 0x0CF: 12 = 3 free + 2 evictable + 5 live + 2 reserved/copying."""
    registry, _ = _registry()
    values = {state: _value(registry, "kvctl_pool_tokens", state=state)
              for state in ("free", "evictable", "protected", "private")}
    assert values == {"free": 3.0, "evictable": 2.0, "protected": 5.0, "private": 2.0}
    assert _value(registry, "kvctl_pool_capacity_tokens") == 12.0
    assert _value(registry, "kvctl_pool_residual_tokens") == 0.0


def test_utilization_and_token_usage_on_the_seed_ledger():
    """U_KV = (12 - 3) / 12 = 0.75 (seed 003 eq. 8); token_usage = (12 - 3 - 2) / 12."""
    registry, _ = _registry()
    assert _value(registry, "kvctl_kv_utilization_ratio") == 0.75
    assert _value(registry, "kvctl_sglang_token_usage_ratio") == 7 / 12


def test_funnel_stages_and_rejections_match_seed_000_0x0CF():
    """The checked synthetic counts 12, 11, 9, 7, 6, 6, 5, 4, 4 and their rejection buckets:
    the fixture only says what happened to each request (support.telemetry_fixtures.SEED_OUTCOMES);
    the counts come out of the real FunnelRecorder and the collector."""
    registry, _ = _registry()
    stages = ("requests", "authorized", "candidates", "compatible", "current_generation",
              "leased", "mapped", "snapshot_current", "executed_hits")
    got = [_value(registry, "kvctl_funnel_requests_total", stage=s) for s in stages]
    assert got == [12.0, 11.0, 9.0, 7.0, 6.0, 6.0, 5.0, 4.0, 4.0]
    reasons = {r: _value(registry, "kvctl_funnel_rejections_total", reason=r)
               for r in ("unauthorized_namespace", "index_miss", "incompatible_namespace",
                         "stale_generation", "evicted", "mapping_lag", "stale_snapshot",
                         "not_executed")}
    assert reasons == {"unauthorized_namespace": 1.0, "index_miss": 2.0,
                       "incompatible_namespace": 2.0, "stale_generation": 1.0, "evicted": 0.0,
                       "mapping_lag": 1.0, "stale_snapshot": 1.0, "not_executed": 0.0}


def test_reference_and_mapping_gauges_match_seed_000_0x0CF():
    """delta_ref = 9 - 9 = 0 and L_map = 0 on the checked snapshot."""
    registry, _ = _registry()
    assert _value(registry, "kvctl_delta_ref_max") == 0.0
    assert _value(registry, "kvctl_delta_protected_tokens") == 0.0
    assert _value(registry, "kvctl_delta_ref_nodes") == 0.0
    assert _value(registry, "kvctl_mapping_lag_tokens") == 0.0


def test_hit_ratio_and_token_counters_follow_the_funnel_lengths():
    """12 prompts of 100 tokens, S_cap = 99 each, the 4 executed hits reuse 64 tokens each:
    S_prompt = 1,200, S_runtime = 256, recomputed 944, cap 1,188, and H_prefix = 256 / 1,200
    (seed 003 eq. 2); the stage tokens agree with the prompt total (12 x 99 enter)."""
    registry, _ = _registry()
    assert _value(registry, "kvctl_prefix_hit_ratio") == 256 / 1200
    assert _value(registry, "kvctl_prompt_tokens_total") == 1200.0
    assert _value(registry, "kvctl_hit_tokens_total") == 256.0
    assert _value(registry, "kvctl_recomputed_tokens_total") == 944.0
    assert _value(registry, "kvctl_prefix_length_tokens_total", length="cap") == 1188.0
    assert _value(registry, "kvctl_funnel_tokens_total", stage="requests") == 1188.0
    assert _value(registry, "kvctl_funnel_tokens_total", stage="executed_hits") == 256.0


def test_engine_info_is_an_info_metric_with_pool_size():
    """kvctl_engine_info carries tree core, page size, policy and pool size as labels."""
    registry, _ = _registry()
    labels = dict(engine="embedded", tree_core="rust", page_size="1", eviction_policy="lru",
                  pool_tokens="12", kv_pool="NoOpMHATokenToKVPool", sglang_version="0.5.23",
                  model="Llama-3-8B")
    assert _value(registry, "kvctl_engine_info", **labels) == 1.0


def test_unobservable_quantities_have_no_sample():
    """None (not observable) leaves the sample out; it is never exported as 0."""
    base = seed_snapshot()
    remote_like = dataclasses.replace(
        base,
        ledger=dataclasses.replace(base.ledger, protected_tokens=None, private_tokens=None),
        refs=RefReconciliation(leases=None, recorded_protected_tokens=None,
                               derived_protected_tokens=None, nodes_checked=None,
                               per_node=False),
        funnel=dataclasses.replace(base.funnel, stages=tuple(
            FunnelStage(name=s.name, requests=None, tokens=None) if s.name == "leased" else s
            for s in base.funnel.stages)),
    )
    registry, _ = _registry(remote_like)
    assert _value(registry, "kvctl_pool_tokens", state="protected") is None
    assert _value(registry, "kvctl_pool_tokens", state="private") is None
    assert _value(registry, "kvctl_pool_tokens", state="free") == 3.0
    assert _value(registry, "kvctl_pool_tail_tokens") is None
    assert _value(registry, "kvctl_delta_ref_max") is None
    assert _value(registry, "kvctl_delta_ref_nodes") is None
    assert _value(registry, "kvctl_ref_leases") is None
    assert _value(registry, "kvctl_funnel_requests_total", stage="leased") is None
    assert _value(registry, "kvctl_funnel_requests_total", stage="mapped") == 5.0


def test_hit_ratio_absent_before_any_prompt():
    """H_prefix is undefined with no prompt tokens: no sample rather than 0 or 100%."""
    base = seed_snapshot()
    empty = dataclasses.replace(base, funnel=dataclasses.replace(
        base.funnel, lengths=dataclasses.replace(base.funnel.lengths, prompt=0, cap=0,
                                                 runtime=0)))
    registry, _ = _registry(empty)
    assert _value(registry, "kvctl_prefix_hit_ratio") is None


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    """One collect: {(sample name, sorted labels): value}."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in registry.collect() for sample in family.samples}


def test_alert_that_cleared_disappears_from_the_next_scrape():
    """Stale label sets are removed: an alert active in one snapshot is gone in the next."""
    alerting = seed_snapshot(seq=1, alerts=(
        Alert(name="reference_leak", severity="critical", evidence="node 7 recorded=2 derived=1"),))
    cleared = seed_snapshot(seq=2)
    registry, _ = _registry(alerting, cleared)
    key = ("kvctl_alert_active", (("alert", "reference_leak"), ("severity", "critical")))
    first, second = _scrape(registry), _scrape(registry)
    assert first[key] == 1.0 and first[("kvctl_alerts_active", ())] == 1.0
    assert key not in second and second[("kvctl_alerts_active", ())] == 0.0


def test_tenant_namespaces_are_hashed_unless_allow_listed():
    """Request namespaces become ns-<12 hex> labels; allow-listed ones pass; '' is default."""
    labeler = NamespaceLabeler(allow=("public",), salt=b"s")
    snap = seed_snapshot(requests=(
        RequestView(rid="a", state="running", namespace="acme-corp", prompt_tokens=10,
                    output_tokens=1, prefix_hit_tokens=0),
        RequestView(rid="b", state="running", namespace="public", prompt_tokens=10,
                    output_tokens=1, prefix_hit_tokens=0),
        RequestView(rid="c", state="finished", namespace="gone", prompt_tokens=10,
                    output_tokens=1, prefix_hit_tokens=0),
    ))
    registry, _ = _registry(snap, labeler=labeler)
    text = generate_latest(registry).decode()
    assert "acme-corp" not in text and "gone" not in text
    assert _value(registry, "kvctl_namespace_requests", namespace=labeler.label("acme-corp")) == 1.0
    assert _value(registry, "kvctl_namespace_requests", namespace="public") == 1.0
    assert _value(registry, "kvctl_requests", state="finished") == 1.0


def test_namespaces_past_the_cap_fold_into_other_and_add_up():
    """Past max_labels distinct hashed labels, tenants share the 'other' label and sum."""
    labeler = NamespaceLabeler(salt=b"s", max_labels=1)
    views = tuple(RequestView(rid=f"r{i}", state="running", namespace=f"t{i}", prompt_tokens=1,
                              output_tokens=1, prefix_hit_tokens=0) for i in range(3))
    registry, _ = _registry(seed_snapshot(requests=views), labeler=labeler)
    assert _value(registry, "kvctl_namespace_requests", namespace=labeler.label("t0")) == 1.0
    assert _value(registry, "kvctl_namespace_requests", namespace="other") == 2.0


class _FailingSource:
    def snapshot(self) -> Snapshot:
        raise ConnectionError("engine went away")

    def take_receipts(self) -> list:
        return []

    def close(self) -> None:
        pass


def test_a_failing_read_still_scrapes_with_up_zero():
    """When snapshot() raises, the scrape succeeds with kvctl_up 0 and no other kvctl family."""
    registry = CollectorRegistry()
    SnapshotCollector(_FailingSource(), registry=registry)
    text = generate_latest(registry).decode()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples == ["kvctl_up 0.0"]


def test_describe_does_not_read_the_engine():
    """Registering (describe) lists every family without calling snapshot()."""
    registry = CollectorRegistry()
    source = FixedSnapshotSource([seed_snapshot()])
    collector = SnapshotCollector(source, registry=registry)
    assert [m.name for m in collector.describe()] == [
        spec.name.removesuffix("_total").removesuffix("_info") for spec in METRICS]
    assert source.reads == 0


class _GatedSource:
    """Blocks inside snapshot() until released, to make read sharing deterministic."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.reads = 0

    def snapshot(self) -> Snapshot:
        self.reads += 1
        self.entered.set()
        self.release.wait(5)
        return seed_snapshot(seq=self.reads)

    def take_receipts(self) -> list:
        return []

    def close(self) -> None:
        pass


class _CountingCondition(threading.Condition):
    """A Condition that counts the threads that went to wait on it (a barrier for the test:
    the read is released only once every scrape is known to be waiting for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Semaphore(0)

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.release()
        return super().wait(timeout)


def test_scrapes_arriving_during_a_read_share_it():
    """Single flight: seven scrapes that arrive while a read is in flight cost no extra read.
    The read is held until all seven wait on the in-flight read, so no scrape can arrive
    after it ended and start a second one (the race that made this test flaky)."""
    source = _GatedSource()
    registry = CollectorRegistry()
    collector = SnapshotCollector(source, registry=registry)
    gate = collector._reader._cond = _CountingCondition()
    first = threading.Thread(target=generate_latest, args=(registry,))
    first.start()
    assert source.entered.wait(5)
    results: list[bytes] = []
    others = [threading.Thread(target=lambda: results.append(generate_latest(registry)))
              for _ in range(7)]
    for thread in others:
        thread.start()
    for _ in others:
        assert gate.waiting.acquire(timeout=5)  # every scrape is parked on the shared read
    source.release.set()
    for thread in [first, *others]:
        thread.join(5)
    assert source.reads == 1
    assert all(b"kvctl_snapshot_sequence 1.0" in body for body in results) and len(results) == 7


def test_max_age_reuses_a_recent_read_and_refreshes_an_old_one():
    """With max_age_s=1, a scrape 0.5 s after a read reuses it; one 1.5 s after reads again."""
    now = [100.0]
    source = FixedSnapshotSource([seed_snapshot(seq=1), seed_snapshot(seq=2)])
    registry = CollectorRegistry()
    SnapshotCollector(source, registry=registry, max_age_s=1.0, clock=lambda: now[0])
    assert _value(registry, "kvctl_snapshot_sequence") == 1.0
    now[0] += 0.5
    assert _value(registry, "kvctl_snapshot_sequence") == 1.0
    now[0] += 1.0
    assert _value(registry, "kvctl_snapshot_sequence") == 2.0
    assert source.reads == 2


def test_a_disconnected_snapshot_exports_up_zero_and_no_readings():
    """A source that answers with a disconnected snapshot (a remote server that went away,
    its last numbers marked stale) exports kvctl_up 0, kvctl_connected 0 and its alerts;
    the stale ledger (3 free of 12) is not exported, neither as its value nor as 0."""
    down = dataclasses.replace(seed_snapshot(), connected=False, alerts=(
        Alert(name="remote_server_unreachable", severity="critical", evidence="refused"),))
    registry, _ = _registry(down)
    text = generate_latest(registry).decode()
    samples = [line.split("{")[0].split(" ")[0] for line in text.splitlines()
               if line and not line.startswith("#")]
    assert samples == ["kvctl_up", "kvctl_snapshot_read_seconds", "kvctl_connected",
                       "kvctl_alert_active", "kvctl_alerts_active"]
    assert (_value(registry, "kvctl_up"), _value(registry, "kvctl_connected")) == (0.0, 0.0)
    assert _value(registry, "kvctl_alert_active", alert="remote_server_unreachable",
                  severity="critical") == 1.0
    assert _value(registry, "kvctl_pool_capacity_tokens") is None
    assert _value(registry, "kvctl_pool_tokens", state="free") is None

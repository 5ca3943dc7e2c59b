"""kvctl's remote side with the plugin's endpoint (issue 11 item 4): inspect and exporter
merge the plugin's snapshot with SGLang's metrics and the KV-event mirror.

The remote server is SGLang's loopback stand-in in its own process (real cache, metrics
collectors and KV-event publisher); the plugin endpoint is a real loopback HTTP server
(tests/plugin_endpoint.py) serving `encode_snapshot` of a REAL embedded-engine snapshot:
SGLang's own tree and allocator with one finished request (192 tokens cached) and one live
request that matched them (so they are protected) and holds private slots. The plugin does
run inside a real SGLang server on this CPU (tests/e2e/test_e2e_plugin.py, docs/cpu-server.md),
but such a server takes minutes to start and its numbers depend on scheduling; here the
endpoint serves the plugin's exact wire contract with a snapshot whose every figure is known,
so the merge is checked against exact values in seconds.
"""

from __future__ import annotations

import json

import pytest
from plugin_endpoint import PluginEndpoint, live_request_snapshot
from remote_relay import Relay, dead_url
from typer.testing import CliRunner

from engine_adapter.funnel import STAGES
from kvctl.cli.app import app

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
HIDDEN_STAGES = STAGES[1:-1]  # authorized .. snapshot_current: None without the plugin


@pytest.fixture(scope="module")
def engine_snapshot(sglang_ready):
    """The embedded engine's snapshot with one live request on a 192-token cached prefix."""
    return live_request_snapshot()


@pytest.fixture
def endpoint(engine_snapshot):
    from engine_adapter.snapshot_codec import encode_snapshot

    ep = PluginEndpoint(encode_snapshot(engine_snapshot), steps=engine_snapshot.counters.steps)
    yield ep
    ep.close()


def inspect(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, ["inspect", "--wait", "0.5", "--json", *args], env=env)


def doc_of(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_embedded_snapshot_has_the_expected_plugin_fields(engine_snapshot):
    """The reference numbers, derived from the workload: the live request's match (192
    tokens = 12 pages of 16) is protected, one lease explains it, delta_ref is 0; its 8
    unmatched prompt rows sit in one private 16-slot page; the funnel saw 2 requests, the
    second one a candidate all the way to an executed hit."""
    s = engine_snapshot
    assert (s.ledger.protected_tokens, s.ledger.private_tokens,
            s.ledger.private_filled_tokens) == (192, 16, 8)
    assert (s.refs.leases, s.refs.delta_ref_max, s.refs.per_node) == (1, 0, True)
    assert [st.requests for st in s.funnel.stages] == [2, 2, 1, 1, 1, 1, 1, 1, 1]


def test_inspect_without_plugin_leaves_plugin_fields_none(loopback_demo_url):
    """No plugin: protected, private, delta_ref and the hidden funnel stages are None."""
    doc = doc_of(inspect("--url", loopback_demo_url))
    snap = doc["snapshot"]
    assert (snap["ledger"]["protected_tokens"], snap["ledger"]["private_tokens"]) == (None, None)
    assert doc["derived"]["delta_ref_max"] is None and snap["refs"]["leases"] is None
    stages = {st["name"]: st["requests"] for st in snap["funnel"]["stages"]}
    assert all(stages[name] is None for name in HIDDEN_STAGES)
    assert doc["plugin"] is None and snap["info"]["engine"] == "remote"


def test_inspect_with_plugin_shows_its_fields(loopback_demo_url, endpoint, engine_snapshot):
    """--plugin-url: the plugin's protected, private, delta_ref, leases, funnel and tree
    nodes appear; every ledger term is the plugin's one sample (its 2,048-token pool, the
    terms summing to it), SGLang's own gauges beside it as `server_ledger` (512)."""
    doc = doc_of(inspect("--url", loopback_demo_url, "--plugin-url", endpoint.url))
    snap, ref = doc["snapshot"], engine_snapshot
    assert doc["plugin"]["state"] == "ok" and snap["info"]["engine"] == "remote+plugin"
    assert (snap["ledger"]["protected_tokens"], snap["ledger"]["private_tokens"]) == (
        192, ref.ledger.private_tokens)
    assert snap["ledger"]["pool_tokens"] == 2048 == doc["derived"]["ledger_terms_tokens"]
    assert snap["server_ledger"]["pool_tokens"] == 512  # SGLang's own gauge, kept beside
    assert (doc["derived"]["delta_ref_max"], snap["refs"]["leases"]) == (0, 1)
    stages = {st["name"]: st["requests"] for st in snap["funnel"]["stages"]}
    assert stages == {st.name: st.requests for st in ref.funnel.stages}
    assert all(stages[name] is not None for name in HIDDEN_STAGES)
    assert snap["counters"]["steps"] == ref.counters.steps
    assert len(snap["tree_nodes"]) == len(ref.tree_nodes) > 0
    assert [a["name"] for a in snap["alerts"]] == []


def test_plugin_is_discovered_through_server_info(loopback_demo_url, endpoint):
    """No --plugin-url: the `kvctl_plugin` entry of /server_info names the endpoint."""
    announce = {"kvctl_plugin": {"url": endpoint.url, "schema_version": 1}}
    relay = Relay(loopback_demo_url, info_extra=announce)
    try:
        doc = doc_of(inspect("--url", relay.url))
    finally:
        relay.close()
    assert (doc["plugin"]["url"], doc["plugin"]["state"]) == (endpoint.url, "ok")
    assert doc["snapshot"]["ledger"]["protected_tokens"] == 192


def test_wrong_token_is_one_line_exit_2(loopback_demo_url, endpoint):
    """A plugin that refuses the token: exit 2 and one line saying so and how to fix it."""
    endpoint.token = TOKEN
    result = inspect("--url", loopback_demo_url, "--plugin-url", endpoint.url,
                     "--plugin-token", "wrong")
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"kvctl: error: {endpoint.url}/healthz refused the bearer token (wrong; pass "
        "--plugin-token or set KVCTL_PLUGIN_TOKEN)")


def test_token_from_the_environment_is_sent(loopback_demo_url, endpoint):
    """KVCTL_PLUGIN_TOKEN is the token when --plugin-token is not given."""
    endpoint.token = TOKEN
    doc = doc_of(inspect("--url", loopback_demo_url, "--plugin-url", endpoint.url,
                         env={"KVCTL_PLUGIN_TOKEN": TOKEN}))
    assert doc["plugin"]["state"] == "ok"


def test_schema_mismatch_is_one_line_exit_2(loopback_demo_url, endpoint):
    """A plugin of another kvctl version (schema 2): exit 2, one line naming both versions."""
    endpoint.schema_version = 2
    result = inspect("--url", loopback_demo_url, "--plugin-url", endpoint.url)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0] == (
        f"kvctl: error: {endpoint.url}: plugin schema_version 2 is not the version this kvctl "
        "reads (1): run the same kvctl version in the server and the client")


@pytest.mark.parametrize("fault", ["dead", "disabled", "starting"])
def test_unavailable_plugin_leaves_the_remote_read(loopback_demo_url, endpoint, fault):
    """A dead, disabled or starting plugin: exit 0, the remote-only snapshot (plugin fields
    None, never the plugin's numbers), and the plugin's state as an alert and in the JSON."""
    url = dead_url() if fault == "dead" else endpoint.url
    endpoint.status = fault if fault != "dead" else "ok"
    doc = doc_of(inspect("--url", loopback_demo_url, "--plugin-url", url))
    snap = doc["snapshot"]
    state = {"dead": "unreachable"}.get(fault, fault)
    assert (doc["plugin"]["state"], snap["info"]["engine"]) == (state, "remote")
    assert (snap["ledger"]["protected_tokens"], doc["derived"]["delta_ref_max"]) == (None, None)
    (alert,) = [a for a in snap["alerts"] if a["name"] == "plugin_unavailable"]
    assert alert["evidence"].startswith(f"{url}: {state}: ")
    if fault != "dead":  # healthz said not ok: /snapshot (a stale sample) is never asked for
        assert endpoint.requests["/snapshot"] == 0


PLUGIN_FAMILIES = ("kvctl_delta_ref_max", "kvctl_ref_leases", "kvctl_delta_ref_nodes",
                   "kvctl_pool_tail_tokens", "kvctl_steps_total")


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape's kvctl samples."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body) if f.name.startswith("kvctl_")
            for s in f.samples}


def sample(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_exporter_reexports_plugin_fields_under_the_embedded_names(
        loopback_demo_url, endpoint, engine_snapshot):
    """`kvctl exporter --url --plugin-url`: protected/private, delta_ref, leases and the
    funnel stages appear under the embedded engine's names (telemetry/metrics_table.py), so
    its dashboards and alerts apply; when the plugin disables itself they are gone at the
    next scrape (not its last numbers) and plugin_unavailable is active."""
    from support.telemetry_fixtures import ExporterProcess

    ref = engine_snapshot
    authorized = ref.funnel.stages[1].requests
    with ExporterProcess("--url", loopback_demo_url, "--plugin-url", endpoint.url,
                         "--interval", "0.2") as exporter:
        live = scrape(exporter.url)
        endpoint.status = "disabled"
        after = scrape(exporter.url)
    assert exporter.returncode == 0, exporter.stderr
    assert sample(live, "kvctl_pool_tokens", state="protected") == 192.0
    assert sample(live, "kvctl_pool_tokens", state="private") == float(ref.ledger.private_tokens)
    # the ledger is the plugin's one sample; SGLang's gauges beside it, labelled as SGLang's
    assert sample(live, "kvctl_pool_capacity_tokens") == float(ref.ledger.pool_tokens)
    assert sample(live, "kvctl_sglang_pool_tokens", state="capacity") == 512.0
    assert (sample(live, "kvctl_delta_ref_max"), sample(live, "kvctl_ref_leases")) == (0.0, 1.0)
    assert sample(live, "kvctl_funnel_requests_total", stage="authorized") == float(authorized)
    assert sample(live, "kvctl_steps_total") == float(ref.counters.steps)
    assert all(any(key[0] == name for key in live) for name in PLUGIN_FAMILIES)
    info = [dict(k[1]) for k in live if k[0] == "kvctl_engine_info"]
    assert info[0]["engine"] == "remote+plugin"
    # disabled: the remote read alone, the plugin's fields absent (never its stale numbers)
    assert sample(after, "kvctl_up") == 1.0
    assert sample(after, "kvctl_pool_tokens", state="protected") is None
    assert sample(after, "kvctl_funnel_requests_total", stage="authorized") is None
    assert not any(key[0] in PLUGIN_FAMILIES for key in after)
    assert sample(after, "kvctl_alert_active", alert="plugin_unavailable",
                  severity="warning") == 1.0


def test_exporter_without_plugin_has_no_plugin_families(loopback_demo_url):
    """Without a plugin the same families are absent (not 0): SGLang does not publish them."""
    from support.telemetry_fixtures import ExporterProcess

    with ExporterProcess("--url", loopback_demo_url, "--interval", "0.2") as exporter:
        samples = scrape(exporter.url)
    assert sample(samples, "kvctl_up") == 1.0
    assert sample(samples, "kvctl_pool_tokens", state="free") is not None
    assert sample(samples, "kvctl_pool_tokens", state="protected") is None
    assert sample(samples, "kvctl_funnel_requests_total", stage="authorized") is None
    assert not any(key[0] in PLUGIN_FAMILIES for key in samples)


def test_inspect_table_shows_the_plugin_rows(loopback_demo_url, endpoint, engine_snapshot):
    """The table view: the protected/private split in numbers, the plugin's state and
    delta_ref max / leases (0 / 1)."""
    result = CliRunner().invoke(app, ["inspect", "--wait", "0.5", "--url", loopback_demo_url,
                                      "--plugin-url", endpoint.url])
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    led = engine_snapshot.ledger
    assert (f"free / evictable / protected / private {led.free_tokens:,} / "
            f"{led.evictable_tokens:,} / 192 / {led.private_tokens:,} (sum "
            f"{led.pool_tokens:,} = pool)") in lines
    assert f"kvctl plugin ok {endpoint.url}" in lines
    assert "delta_ref max / leases (seed 000 0x04B) 0 / 1" in lines

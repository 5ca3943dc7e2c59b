"""PluginClient over real loopback HTTP (tests/plugin_endpoint.py serving the seed 000
0x0CF snapshot of tests/support/telemetry_fixtures.py): one state per outcome, the backoff repeating a
failure without I/O, and never a stale sample once the plugin is not ok."""

from __future__ import annotations

import pytest
from plugin_endpoint import PluginEndpoint
from remote_relay import dead_url

from engine_adapter.remote.backoff import Backoff
from engine_adapter.remote.plugin_client import PluginClient
from engine_adapter.snapshot_codec import encode_snapshot
from kvctl.errors import InputError
from support.telemetry_fixtures import seed_snapshot

pytestmark = pytest.mark.integration


@pytest.fixture
def endpoint():
    ep = PluginEndpoint(encode_snapshot(seed_snapshot(seq=3)), token="tok", steps=41)
    yield ep
    ep.close()


def test_ok_read_decodes_the_served_snapshot(endpoint):
    """Token accepted: state ok, the snapshot equals the one encoded, health passed on."""
    read = PluginClient(endpoint.url, token="tok").read(now=0.0)
    assert (read.state, read.snapshot, read.health["steps"]) == ("ok", seed_snapshot(seq=3), 41)


def test_missing_token_is_unauthorized_and_repeated_during_backoff(endpoint):
    """No token: unauthorized (says 'missing'); a read within the backoff repeats it with
    its retry delay and asks the endpoint nothing."""
    client = PluginClient(endpoint.url, backoff=Backoff(initial_s=5.0))
    first = client.read(now=100.0)
    assert (first.state, first.snapshot) == ("unauthorized", None)
    assert "(missing; pass --plugin-token or set KVCTL_PLUGIN_TOKEN)" in first.error
    asked = sum(endpoint.requests.values())
    again = client.read(now=101.0)
    assert (again.state, again.retry_in_s) == ("unauthorized", 4.0)
    assert sum(endpoint.requests.values()) == asked


def test_disabled_after_ok_never_returns_the_old_sample(endpoint):
    """ok, then the plugin disables itself: no snapshot, and /snapshot is not even asked."""
    client = PluginClient(endpoint.url, token="tok")
    assert client.read(now=0.0).ok
    endpoint.status = "disabled"
    read = client.read(now=1.0)
    assert (read.state, read.snapshot) == ("disabled", None)
    assert read.error == (
        "the plugin disabled itself: disabled after 5 failures; last: ValueError: boom")
    assert endpoint.requests["/snapshot"] == 1


def test_schema_mismatch_names_both_versions(endpoint):
    endpoint.schema_version = 7
    read = PluginClient(endpoint.url, token="tok").read(now=0.0)
    assert (read.state, read.snapshot) == ("schema_mismatch", None)
    assert "plugin schema_version 7 is not the version this kvctl reads (1)" in read.error


def test_malformed_snapshot_document(endpoint):
    """A same-version document whose snapshot is not a Snapshot: malformed, path named."""
    endpoint.snapshot_doc = {"seq": "x"}
    read = PluginClient(endpoint.url, token="tok").read(now=0.0)
    assert (read.state, read.snapshot) == ("malformed", None)
    assert read.error.startswith(f"{endpoint.url}/snapshot: snapshot")


def test_dead_endpoint_is_unreachable():
    url = dead_url()
    read = PluginClient(url).read(now=0.0)
    assert (read.state, read.snapshot) == ("unreachable", None)
    assert read.error.startswith(f"{url}/healthz: ")


def test_bad_plugin_url_is_an_input_error():
    with pytest.raises(InputError, match=r"^--plugin-url 'ftp://x:1' is not an http\(s\)"):
        PluginClient("ftp://x:1")

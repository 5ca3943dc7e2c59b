"""Reading /server_info (engine_adapter/remote/server_info.py) and base URLs (http_fetch.py).

The documents follow `build_server_info` (srt/utils/common.py) and the `kv_events`
descriptor of `runtime_context.describe_kv_events_publisher`; the integration tests serve
the dict SGLang itself builds.
"""

from __future__ import annotations

import json

import pytest

from engine_adapter.remote.http_fetch import normalize_base_url
from engine_adapter.remote.server_info import MalformedServerInfo, parse_server_info
from kvctl.errors import InputError

pytestmark = pytest.mark.unit

BASE = "http://10.0.0.7:30000"


def doc(**overrides):
    document = {
        "page_size": 16,
        "served_model_name": "llama",
        "radix_eviction_policy": "lru",
        "max_total_num_tokens": 100_000,
        "version": "0.5.23",
        "startup_time": 12.5,
        "dp_size": 1,
        "enable_hierarchical_cache": False,
        "kv_events_config": json.dumps(
            {"publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}
        ),
        "kv_events": {
            "publisher": "zmq",
            "endpoint_host": "*",
            "endpoint_port_base": 5557,
            "topic": "",
            "block_size": 16,
            "dp_size": 1,
            "replay_endpoint_port_base": 5558,
        },
    }
    document.update(overrides)
    return document


def test_wildcard_host_is_replaced_by_the_url_host():
    """SGLang advertises "*"; subscribers dial the worker URL's host."""
    events = parse_server_info(doc(), base_url=BASE).kv_events
    assert (events.endpoint, events.replay_endpoint) == (
        "tcp://10.0.0.7:5557",
        "tcp://10.0.0.7:5558",
    )


def test_concrete_host_is_kept():
    """A publisher bound to a concrete host is dialled there."""
    descriptor = dict(doc()["kv_events"], endpoint_host="10.0.0.9")
    events = parse_server_info(doc(kv_events=descriptor), base_url=BASE).kv_events
    assert events.endpoint == "tcp://10.0.0.9:5557"


def test_pool_page_and_identity_fields():
    """page size, pool size, model, policy, version and startup time are read."""
    info = parse_server_info(doc(), base_url=BASE)
    assert (
        info.page_size,
        info.max_total_num_tokens,
        info.model,
        info.eviction_policy,
        info.version,
        info.startup_time,
    ) == (16, 100_000, "llama", "lru", "0.5.23", 12.5)


def test_raw_config_is_used_without_descriptor():
    """An older server without the descriptor: the endpoint comes from kv_events_config."""
    events = parse_server_info(doc(kv_events=None), base_url=BASE).kv_events
    assert (events.endpoint, events.replay_endpoint) == (
        "tcp://10.0.0.7:5557",
        "tcp://10.0.0.7:5558",
    )


def test_dynamo_format_is_read_from_the_config():
    """format "dynamo" changes the hashes a router must compute."""
    config = json.dumps({"publisher": "zmq", "endpoint": "tcp://*:5557", "format": "dynamo"})
    assert (
        parse_server_info(doc(kv_events_config=config), base_url=BASE).kv_events.event_format
        == "dynamo"
    )


def test_no_publisher_means_no_events():
    """Without --kv-events-config there is nothing to subscribe to."""
    assert (
        parse_server_info(doc(kv_events=None, kv_events_config=None), base_url=BASE).kv_events
        is None
    )


def test_bad_page_size_is_malformed():
    """page_size must be a positive int."""
    with pytest.raises(MalformedServerInfo, match="page_size"):
        parse_server_info(doc(page_size="sixteen"), base_url=BASE)


def test_non_object_is_malformed():
    """A JSON list is not server info."""
    with pytest.raises(MalformedServerInfo):
        parse_server_info([1, 2], base_url=BASE)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("localhost:30000", "http://localhost:30000"),
        ("http://h:1/", "http://h:1"),
        ("https://h:8443", "https://h:8443"),
        ("http://localhost", "http://localhost"),  # a scheme implies its port
        ("http://[::1]:9/", "http://[::1]:9"),
    ],
)
def test_base_url_is_normalized(raw, expected):
    """host:port gains http://; a trailing slash goes."""
    assert normalize_base_url(raw) == expected


@pytest.mark.parametrize("raw", ["ftp://h:1", "http://", "http://h:99999999", "notaurl",
                                 "http:// h:1", "http://h:1?x=1"])
def test_bad_base_url_is_input_error(raw):
    """Anything but http(s)://HOST[:PORT] or HOST:PORT is an input error (a bare word has no
    scheme to imply a port: it is a typo, not a server on port 80)."""
    with pytest.raises(InputError):
        normalize_base_url(raw)

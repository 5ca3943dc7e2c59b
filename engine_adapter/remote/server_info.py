"""Read a SGLang server's `/server_info` (or the deprecated `/get_server_info`).

The shape is `build_server_info` in `srt/utils/common.py` plus what `http_server.server_info`
adds: every resolved server arg (`page_size`, `served_model_name`, `radix_eviction_policy`,
`kv_events_config`, `dp_size`, `enable_hierarchical_cache`, ...), the scheduler's init info
(`max_total_num_tokens`, `max_req_input_len`, `startup_time`), the publisher descriptor
`kv_events` (`runtime_context.describe_kv_events_publisher`), `version` and
`internal_states`.

The KV-event endpoint comes from the `kv_events` descriptor: rank r listens on
`tcp://<host>:<endpoint_port_base + r>`; a wildcard host ("*", "0.0.0.0", "::") must be
replaced with the worker URL's host ("subscribers MUST substitute", SGLang's docstring).
kvctl's own plugin, when the server runs it, adds `"kvctl_plugin": {"url", "schema_version"}`
(engine_adapter/plugin/server_info.py); its URL is `ServerInfo.plugin_url`.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from engine_adapter.remote.http_fetch import http_get, url_host

_WILDCARDS = frozenset({"*", "0.0.0.0", "::", "[::]"})


class MalformedServerInfo(ValueError):
    """The server answered, but not with SGLang's server-info JSON."""


@dataclass(frozen=True, kw_only=True)
class KvEventsEndpoint:
    endpoint: str
    replay_endpoint: str | None
    topic: str
    block_size: int | None
    dp_size: int
    event_format: str  # "default" | "dynamo" (hash namespacing, kv_events.KVEventsConfig)


@dataclass(frozen=True, kw_only=True)
class ServerInfo:
    page_size: int
    max_total_num_tokens: int | None
    model: str
    eviction_policy: str
    version: str
    startup_time: float | None
    dp_size: int
    hierarchical_cache: bool
    kv_events: KvEventsEndpoint | None
    source_path: str  # which endpoint answered
    plugin_url: str | None = None  # kvctl's plugin endpoint, when `kvctl_plugin` names one


def fetch_server_info(base_url: str, *, timeout_s: float) -> ServerInfo:
    """GET /server_info, falling back to /get_server_info on 404. Raises Unreachable or
    MalformedServerInfo."""
    document, path = fetch_server_info_document(base_url, timeout_s=timeout_s)
    return parse_server_info(document, base_url=base_url, source_path=path)


def fetch_server_info_document(base_url: str, *, timeout_s: float) -> tuple[Any, str]:
    """The raw JSON document of /server_info (or /get_server_info) and the path that
    answered, for fields ServerInfo does not carry. Raises Unreachable or MalformedServerInfo."""
    for path in ("/server_info", "/get_server_info"):
        status, body = http_get(f"{base_url}{path}", timeout_s=timeout_s)
        if status == 404:
            continue
        if status != 200:
            raise MalformedServerInfo(f"{base_url}{path} answered HTTP {status}")
        try:
            return json.loads(body), path
        except ValueError:
            raise MalformedServerInfo(f"{base_url}{path} is not JSON") from None
    raise MalformedServerInfo(f"{base_url} has neither /server_info nor /get_server_info")


def parse_server_info(doc: Any, *, base_url: str, source_path: str = "/server_info") -> ServerInfo:
    """Extract what kvctl needs; raises MalformedServerInfo when `page_size` is unusable."""
    if not isinstance(doc, dict):
        raise MalformedServerInfo("server info is not a JSON object")
    page_size = doc.get("page_size")
    if page_size is None and "page_size" in doc:
        page_size = 1  # ServerArgs leaves it None only when unresolved; SGLang then uses 1
    if not isinstance(page_size, int) or page_size <= 0:
        raise MalformedServerInfo(f"server info page_size {page_size!r} is not a positive int")
    max_total = doc.get("max_total_num_tokens")
    startup = doc.get("startup_time")
    return ServerInfo(
        page_size=page_size,
        max_total_num_tokens=max_total if isinstance(max_total, int) else None,
        model=str(doc.get("served_model_name") or doc.get("model_path") or ""),
        eviction_policy=str(doc.get("radix_eviction_policy") or ""),
        version=str(doc.get("version") or ""),
        startup_time=float(startup) if isinstance(startup, (int, float)) else None,
        dp_size=doc.get("dp_size") if isinstance(doc.get("dp_size"), int) else 1,
        hierarchical_cache=bool(doc.get("enable_hierarchical_cache")),
        kv_events=_kv_events(doc, base_url),
        source_path=source_path,
        plugin_url=discovered_url(doc, base_url),
    )


def _kv_events(doc: dict, base_url: str) -> KvEventsEndpoint | None:
    config = _config(doc.get("kv_events_config"))
    descriptor = doc.get("kv_events")
    host = url_host(base_url)
    event_format = str(config.get("format") or "default")
    if isinstance(descriptor, dict) and isinstance(descriptor.get("endpoint_port_base"), int):
        published_host = str(descriptor.get("endpoint_host") or "*")
        if published_host not in _WILDCARDS:
            host = published_host
        replay_port = descriptor.get("replay_endpoint_port_base")
        return KvEventsEndpoint(
            endpoint=f"tcp://{host}:{descriptor['endpoint_port_base']}",
            replay_endpoint=f"tcp://{host}:{replay_port}" if isinstance(replay_port, int) else None,
            topic=str(descriptor.get("topic") or ""),
            block_size=descriptor.get("block_size"),
            dp_size=int(descriptor.get("dp_size") or 1),
            event_format=event_format,
        )
    if config.get("publisher") != "zmq":
        return None
    # No descriptor (an older server): derive from the raw config, as the descriptor would.
    endpoint = _splice(config.get("endpoint") or "tcp://*:5557", host)
    if endpoint is None:
        return None
    return KvEventsEndpoint(
        endpoint=endpoint,
        replay_endpoint=_splice(config.get("replay_endpoint"), host),
        topic=str(config.get("topic") or ""),
        block_size=None,
        dp_size=1,
        event_format=event_format,
    )


def _config(raw: Any) -> dict:
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _splice(endpoint: Any, host: str) -> str | None:
    if not isinstance(endpoint, str) or not endpoint.startswith("tcp://"):
        return None
    address, _, port = endpoint[len("tcp://") :].rpartition(":")
    if not port.isdigit():
        return None
    return f"tcp://{host if address in _WILDCARDS else address}:{port}"


def discovered_url(server_info: dict | None, base_url: str) -> str | None:
    """The plugin's URL from /server_info's `kvctl_plugin` entry (None without one).

    A loopback or wildcard host is replaced by the host the client reached the server at,
    as for the KV-event endpoints (the plugin announces its bind address)."""
    entry = server_info.get("kvctl_plugin") if isinstance(server_info, dict) else None
    url = entry.get("url") if isinstance(entry, dict) else None
    if not isinstance(url, str) or not url:
        return None
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    try:
        _ = parts.port
    except ValueError:
        return None  # an unusable announcement: the plugin is simply not discovered
    if parts.scheme not in ("http", "https"):
        return None
    if parts.hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::", None):
        server = urllib.parse.urlsplit(base_url)
        if server.hostname and parts.port is not None:
            host = f"[{server.hostname}]" if ":" in server.hostname else server.hostname
            return f"{parts.scheme}://{host}:{parts.port}"
    return f"{parts.scheme}://{parts.netloc}"

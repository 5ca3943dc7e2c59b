"""Discovery: SGLang's `/server_info` names the plugin's endpoint.

`build_server_info` (sglang/srt/utils/common.py) builds the document `/server_info` serves,
in the HTTP-server process; load_plugins() runs there too (srt/entrypoints/engine.py). The
schedulers' addresses follow from the same environment (settings.py), so that process can
state them without asking the schedulers::

    "kvctl_plugin": {"url": "http://HOST:PORT",       DP rank 0
                     "schema_version": 1,
                     "port_base": PORT, "dp_size": N} DP rank r serves on port_base + r

A wildcard bind (0.0.0.0) is announced as the server's own `host` argument, or loopback;
a client that reached the server at another address substitutes that host, as it does for
the KV-event endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine_adapter.plugin.settings import PluginSettings, WILDCARD_HOSTS
from engine_adapter.snapshot_codec import SCHEMA_VERSION

KEY = "kvctl_plugin"


def plugin_address(environ: Mapping[str, str], *, server_host: str | None,
                   dp_size: int) -> dict:
    """The `kvctl_plugin` entry for a server whose HTTP `host` argument is `server_host`."""
    settings = PluginSettings.from_env(environ)
    host = None if server_host in WILDCARD_HOSTS else server_host
    return {"url": settings.url(0, server_host=host), "schema_version": SCHEMA_VERSION,
            "port_base": settings.port_base, "dp_size": dp_size}


def add_plugin_address(result: Any, environ: Mapping[str, str]) -> None:
    """The `build_server_info` AFTER hook: `result` is the dict SGLang returns."""
    if not isinstance(result, dict):
        return
    dp_size = result.get("dp_size")
    result[KEY] = plugin_address(environ, server_host=result.get("host"),
                                 dp_size=dp_size if isinstance(dp_size, int) else 1)

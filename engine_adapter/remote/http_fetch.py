"""One small HTTP GET for the remote attach (stdlib only, so `kvctl inspect` starts fast)."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.parse
import urllib.request

from engine_adapter.base.errors import InputError

MAX_BODY_BYTES = 64 * 1024 * 1024


class Unreachable(Exception):
    """The server did not answer (refused, reset, timed out, DNS); the message says which."""


_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")  # name, IPv4, IPv6


def normalize_base_url(url: str, *, what: str = "--url") -> str:
    """`host:port` or `http(s)://host[:port][/path]` to `http(s)://host:port[/path]`;
    InputError naming the option `what` otherwise. Without a scheme the port is required
    (`notaurl` is a typo, not a server on port 80)."""
    candidate = url.strip()
    has_scheme = "://" in candidate
    if not has_scheme:
        candidate = f"http://{candidate}"
    parsed = urllib.parse.urlsplit(candidate)
    if (parsed.scheme not in ("http", "https") or not parsed.hostname
            or not _HOSTNAME.fullmatch(parsed.hostname) or parsed.query or parsed.fragment):
        raise InputError(f"{what} {url!r} is not an http(s)://HOST:PORT address")
    try:
        port = parsed.port  # raises ValueError for an out-of-range port
    except ValueError:
        raise InputError(f"{what} {url!r} has an invalid port") from None
    if port is None and not has_scheme:
        raise InputError(f"{what} {url!r} is not an http(s)://HOST:PORT address")
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"


def url_host(base_url: str) -> str:
    """The host part of a base URL, IPv6 re-bracketed for splicing into tcp:// endpoints."""
    host = urllib.parse.urlsplit(base_url).hostname or "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def http_get(url: str, *, timeout_s: float,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET `url`; returns (status, body) for any HTTP answer, raises Unreachable otherwise.
    `headers` are added to the request (e.g. a bearer token)."""
    request = urllib.request.Request(
        url, headers={"Accept": "*/*", "User-Agent": "kvctl", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, response.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as err:
        body = err.read(MAX_BODY_BYTES) if err.fp is not None else b""
        return err.code, body
    except urllib.error.URLError as err:
        raise Unreachable(f"{url}: {err.reason}") from None
    except (OSError, socket.timeout) as err:  # reset, timeout mid-body, ...
        raise Unreachable(f"{url}: {err}") from None

"""Find a server's kvctl plugin and poll its `/records` stream (engine_adapter/recording/route.py).

`connect(url, ...)` reads the SGLang server's `/server_info` (model, page size, and the
plugin's address under `"kvctl_plugin": {"url": ...}` when the plugin publishes it), then
polls the plugin once to prove that recording is on with the expected block size. Every
way that can fail before anything is recorded is an InputError naming the fix (exit 2):

    --url unreachable / not SGLang      -> check --url
    no plugin advertised, no --plugin-url -> start the server with the plugin, or pass it
    plugin unreachable / no /records    -> start it with KVCTL_SGLANG_PLUGIN=1 / upgrade
    401 / 403                           -> --plugin-token (the server's KVCTL_PLUGIN_TOKEN)
    recording off                       -> KVCTL_RECORD=1
    --block-tokens not a multiple of the server's blocks -> a multiple, or
                                           KVCTL_RECORD_BLOCK_TOKENS on the server

The server hashes blocks of its page size by default (engine_adapter/recording/tap.py);
`--block-tokens N` (a multiple of that) coarsens them here, losing nothing a Mooncake trace
of N-token blocks would keep (`coarsen`). After that, `RecordsClient.poll()` raises
Unreachable / RuntimeFailure; the session decides.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from dataclasses import dataclass

from engine_adapter.recording.recorder import TrafficRecord
from engine_adapter.recording.route import RECORDS_SCHEMA_VERSION
from engine_adapter.remote.http_fetch import Unreachable, http_get, normalize_base_url
from engine_adapter.remote.server_info import (MalformedServerInfo, fetch_server_info_document,
                                               parse_server_info)
from kvctl.errors import InputError, RuntimeFailure

PLUGIN_FIX = "start the server with KVCTL_SGLANG_PLUGIN=1 KVCTL_RECORD=1"


@dataclass(frozen=True, kw_only=True)
class ServerTarget:
    """A server and its kvctl plugin, as /server_info describes them (kvctl calibrate's)."""

    server_url: str
    plugin_url: str
    model: str
    page_size: int
    dp_size: int
    version: str


@dataclass(frozen=True, kw_only=True)
class Target(ServerTarget):
    """What the sidecar says about the recorded server."""

    block_tokens: int  # tokens per hash id in the trace written
    server_block_tokens: int  # tokens per digest the server hashes


@dataclass(frozen=True, kw_only=True)
class RecordsPage:
    """One `/records` answer, records decoded (digests as bytes)."""

    recording_id: str
    block_tokens: int
    dropped: int
    in_flight: int
    errors: int
    records: tuple[TrafficRecord, ...]
    next_ack: int


class RecordsClient:
    """Polls one plugin endpoint, acknowledging what it has been given."""

    def __init__(self, plugin_url: str, *, token: str | None, timeout_s: float = 5.0,
                 limit: int = 4096) -> None:
        self.plugin_url = plugin_url
        self.group = 1  # server blocks per trace block (coarsen)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self.limit = limit
        self.ack = 0
        self.recording_id = ""

    def poll(self, *, limit: int | None = None) -> RecordsPage:
        """Fetch the next page (up to `limit`, default the client's), acking `self.ack`.
        Raises Unreachable, InputError for an answer that names a fix (token, recording
        off), RuntimeFailure for a bad body."""
        query = urllib.parse.urlencode({"ack": self.ack, "limit": limit or self.limit,
                                        "recording": self.recording_id})
        url = f"{self.plugin_url}/records?{query}"
        status, body = http_get(url, timeout_s=self._timeout_s, headers=self._headers)
        document = _json(body)
        if status in (401, 403):
            raise InputError(f"the kvctl plugin at {self.plugin_url} refused the token (HTTP "
                             f"{status}): pass --plugin-token, the server's KVCTL_PLUGIN_TOKEN")
        if status == 404:
            error = document.get("error") if isinstance(document, dict) else None
            if isinstance(error, str) and "recording" in error:  # route.py: off, and why
                raise InputError(f"{self.plugin_url}: {error}")
            raise InputError(f"{self.plugin_url} serves no /records: the kvctl plugin there "
                             "predates recording (install this kvctl on the server) or "
                             "--plugin-url points elsewhere")
        if status != 200 or not isinstance(document, dict):
            raise RuntimeFailure(f"{url} answered HTTP {status}"
                                 + ("" if isinstance(document, dict) else ", not JSON"))
        page = _page(document, url, self.group)
        self.ack, self.recording_id = page.next_ack, page.recording_id
        return page


def connect(url: str, *, plugin_url: str | None, token: str | None,
            block_tokens: int | None, timeout_s: float = 5.0,
            ) -> tuple[Target, RecordsClient, RecordsPage]:
    """Check everything before recording; returns the target, a client and its first page
    (records finished since the last reader acknowledged, possibly none). `block_tokens`
    None: the server's blocks as they are."""
    base = normalize_base_url(url)
    try:
        document, _path = fetch_server_info_document(base, timeout_s=timeout_s)
        info = parse_server_info(document, base_url=base)
    except Unreachable as err:
        raise InputError(f"cannot reach the SGLang server ({err}): check --url") from None
    except MalformedServerInfo as err:
        raise InputError(
            f"{base} does not look like an SGLang server ({err}): check --url") from None
    if plugin_url is None:
        advertised = document.get("kvctl_plugin") if isinstance(document, dict) else None
        plugin_url = advertised.get("url") if isinstance(advertised, dict) else None
        if not isinstance(plugin_url, str) or not plugin_url:
            raise InputError(f"{base} advertises no kvctl plugin in /server_info: {PLUGIN_FIX}, "
                             "or pass --plugin-url")
        plugin_url = _reachable(
            normalize_base_url(plugin_url, what=f"{base}'s advertised kvctl plugin URL"), base)
    plugin = normalize_base_url(plugin_url, what="--plugin-url")
    client = RecordsClient(plugin, token=token, timeout_s=timeout_s)
    try:
        page = client.poll()
    except Unreachable as err:
        raise InputError(f"cannot reach the kvctl plugin ({err}): {PLUGIN_FIX}, "
                         "or fix --plugin-url") from None
    except RuntimeFailure as err:
        raise InputError(f"the kvctl plugin at {plugin} answered badly ({err}): install the "
                         "same kvctl version on the server") from None
    server_blocks = page.block_tokens
    if block_tokens is None:
        block_tokens = server_blocks
    if block_tokens % server_blocks:
        raise InputError(
            f"the server records {server_blocks}-token blocks; --block-tokens {block_tokens} "
            f"is not a multiple of {server_blocks}: pass a multiple, or restart the server "
            f"with KVCTL_RECORD_BLOCK_TOKENS={block_tokens}")
    if block_tokens != server_blocks:  # re-read the first page at the coarser size
        client.group = block_tokens // server_blocks
        page = dataclasses.replace(page, block_tokens=block_tokens, records=tuple(
            dataclasses.replace(r, blocks=coarsen(r.blocks, client.group))
            for r in page.records))
    target = Target(server_url=base, plugin_url=plugin, model=info.model,
                    page_size=info.page_size, dp_size=info.dp_size, version=info.version,
                    block_tokens=block_tokens, server_block_tokens=server_blocks)
    return target, client, page


def coarsen(blocks: tuple[bytes, ...], group: int) -> tuple[bytes, ...]:
    """The digests of blocks `group` times larger: every group-th digest, and the last.
    Each digest covers the whole prefix up to its block's end (block_hasher.py), so the
    digest ending a coarse block is that block's prefix identity, as Mooncake's hash is:

        server (group 4):  d0 d1 d2 d3 | d4 d5 d6 d7 | d8 d9     (last block partial)
        coarse:                     d3 |          d7 |    d9
    """
    if group == 1 or not blocks:
        return blocks
    picked = blocks[group - 1::group]
    return picked + (blocks[-1],) if len(blocks) % group else picked


_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", "*"})


def _reachable(advertised: str, server_url: str) -> str:
    """The plugin announces loopback or a wildcard when it cannot know the server's public
    address; a client that reached the server elsewhere substitutes that host (as for the
    KV-event endpoints, server_info.py). An explicit --plugin-url is never rewritten."""
    parts = urllib.parse.urlsplit(advertised)
    server_host = urllib.parse.urlsplit(server_url).hostname or ""
    if (parts.hostname or "") not in _LOCAL_HOSTS or server_host in _LOCAL_HOSTS:
        return advertised
    host = f"[{server_host}]" if ":" in server_host else server_host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _json(body: bytes):
    try:
        return json.loads(body)
    except ValueError:
        return None


def _page(document: dict, url: str, group: int = 1) -> RecordsPage:
    """Decode and validate one body (digests coarsened `group` to one); RuntimeFailure
    naming the problem otherwise."""
    version = document.get("schema_version")
    if version != RECORDS_SCHEMA_VERSION:
        raise RuntimeFailure(f"{url}: /records schema_version {version!r}, this kvctl reads "
                             f"{RECORDS_SCHEMA_VERSION}")
    try:
        records = tuple(
            TrafficRecord(seq=int(r["seq"]), arrival_s=float(r["arrival_s"]),
                          input_length=int(r["input_length"]),
                          output_length=int(r["output_length"]),
                          blocks=coarsen(tuple(bytes.fromhex(b) for b in r["blocks"]), group),
                          arrival_seq=int(r.get("arrival_seq", 0)))
            for r in document["records"])
        return RecordsPage(recording_id=str(document["recording_id"]),
                           block_tokens=int(document["block_tokens"]) * group,
                           dropped=int(document["dropped"]), in_flight=int(document["in_flight"]),
                           errors=int(document.get("errors", 0)), records=records,
                           next_ack=int(document["next_ack"]))
    except (KeyError, TypeError, ValueError) as err:
        raise RuntimeFailure(
            f"{url}: malformed /records body ({type(err).__name__}: {err})") from None

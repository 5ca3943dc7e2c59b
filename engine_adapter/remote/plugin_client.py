"""A client for the kvctl plugin's endpoint inside an SGLang scheduler (issue 11 item 4).

The plugin (engine_adapter/plugin, run by SGLang's own `load_plugins()`) serves::

    GET /healthz   200 {"schema_version", "kvctl_version", "status": "ok"|"starting"|"disabled",
                        "failures", "disabled_reason", "dp_rank", "steps"}
    GET /snapshot  200 {"schema_version", "kvctl_version", "snapshot": encode_snapshot(latest)}
                   503 {"error"} before the first sample or once disabled;  401 bad token

`PluginClient.read()` asks /healthz, then /snapshot when the plugin says "ok", and never
raises for a sick plugin: every outcome is a `PluginRead` whose `state` says what happened
and whose `snapshot` is set only for a current, decoded, same-schema reading::

    state          snapshot  when
    ok             yes       200 with a document of this kvctl's SCHEMA_VERSION
    starting       no        healthz "starting", or /snapshot 503 before the first sample
    disabled       no        healthz "disabled" (the plugin's own failure budget ran out)
    unauthorized   no        401: --plugin-token / KVCTL_PLUGIN_TOKEN missing or wrong
    schema_mismatch no       another kvctl version's plugin (codec.check_schema)
    malformed      no        an answer that is not the plugin's JSON
    unreachable    no        refused, timed out, reset

A failed read schedules the next attempt with the same exponential backoff as the remote
attach (backoff.py); reads before then repeat that failure at once without I/O (with
`retry_in_s`), so a misconfiguration stays named as such. A last
good snapshot is never handed out again once a read failed: stale plugin numbers are not
presented as current.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

from engine_adapter.remote.backoff import Backoff
from engine_adapter.remote import http_fetch
from engine_adapter.remote.http_fetch import Unreachable, normalize_base_url
from engine_adapter.snapshot import Snapshot
from engine_adapter.base.errors import InputError

TOKEN_ENV = "KVCTL_PLUGIN_TOKEN"
STATES = ("ok", "starting", "disabled", "unauthorized", "schema_mismatch", "malformed",
          "unreachable")


@dataclass(frozen=True, kw_only=True)
class PluginRead:
    """One read of the plugin: `snapshot` only when `state == "ok"`."""

    url: str
    state: str
    snapshot: Snapshot | None
    error: str | None = None
    health: dict[str, Any] | None = None
    kvctl_version: str | None = None
    retry_in_s: float | None = None  # set when this is a failure repeated during backoff

    @property
    def ok(self) -> bool:
        return self.state == "ok"


class PluginClient:
    """Reads one plugin endpoint. Mutates only itself (its backoff); thread-compatible
    (callers serialize reads, as RemoteEngine does under its lock)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 2.0,
                 backoff: Backoff | None = None) -> None:
        self.url = normalize_base_url(url, what="--plugin-url")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_s = timeout_s
        self._backoff = backoff or Backoff()
        self._last_failure: PluginRead | None = None  # repeated, without I/O, until retry

    def read(self, now: float | None = None) -> PluginRead:
        """See the module docstring. Never raises for the plugin's trouble."""
        now = time.monotonic() if now is None else now
        if not self._backoff.ready(now) and self._last_failure is not None:
            return dataclasses.replace(self._last_failure, retry_in_s=self._backoff.retry_in(now))
        try:
            result = self._fetch()
        except Unreachable as err:
            result = self._read("unreachable", str(err))
        if result.ok or result.state == "starting":
            self._backoff.succeeded()
            self._last_failure = None
        else:
            self._backoff.failed(now)
            self._last_failure = result
        return result

    def _fetch(self) -> PluginRead:
        from engine_adapter.snapshot_codec import SchemaMismatch, check_schema, decode_snapshot

        status, health = self._get_json("/healthz")
        if status != 200 or not isinstance(health, dict):
            return self._refusal("/healthz", status, health)
        reported = health.get("status")
        if reported == "disabled":
            return self._read("disabled", f"the plugin disabled itself: "
                              f"{health.get('disabled_reason') or 'no reason given'}", health)
        if reported == "starting":
            return self._read("starting", "the plugin has not sampled yet", health)
        status, doc = self._get_json("/snapshot")
        if status == 503:
            return self._read("starting", _error_of(doc) or "no sample yet", health)
        if status != 200:
            return self._refusal("/snapshot", status, doc, health)
        try:
            check_schema(doc)
            snapshot = decode_snapshot(doc.get("snapshot"))
        except SchemaMismatch as err:
            return self._read("schema_mismatch", f"{self.url}: {err}", health, doc)
        except InputError as err:
            return self._read("malformed", f"{self.url}/snapshot: {err}", health)
        return PluginRead(url=self.url, state="ok", snapshot=snapshot, health=health,
                          kvctl_version=doc.get("kvctl_version"))

    def _get_json(self, path: str) -> tuple[int, Any]:
        status, body = http_fetch.http_get(f"{self.url}{path}", timeout_s=self._timeout_s,
                                           headers=self._headers)
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None  # not JSON: judged by the caller with the status

    def _refusal(self, path: str, status: int, doc: Any,
                 health: dict | None = None) -> PluginRead:
        if status == 401:
            how = "wrong" if self._headers else "missing"
            return self._read("unauthorized", f"{self.url}{path} refused the bearer token "
                              f"({how}; pass --plugin-token or set {TOKEN_ENV})", health)
        if status == 200 and doc is None:
            return self._read("malformed", f"{self.url}{path} is not JSON", health)
        detail = _error_of(doc)
        return self._read("malformed", f"{self.url}{path} answered HTTP {status}"
                          + (f": {detail}" if detail else ""), health)

    def _read(self, state: str, error: str, health: dict | None = None,
              doc: Any = None) -> PluginRead:
        version = doc.get("kvctl_version") if isinstance(doc, dict) else None
        return PluginRead(url=self.url, state=state, snapshot=None, error=error, health=health,
                          kvctl_version=version)


def _error_of(doc: Any) -> str | None:
    error = doc.get("error") if isinstance(doc, dict) else None
    return " ".join(str(error).split()) if error else None


"""Collect timed scheduler steps from the kvctl plugin of a live server (`/step_samples`,
engine_adapter/plugin/step_route.py).

    find_plugin(url, plugin_url=None) -> ServerTarget    the server, its plugin, facts
                                                         (kvctl record's Target, less blocks)
    collect_samples(plugin_url, since=0) -> SamplePage   one read (what rectwin's drive uses)
    SampleCollector(plugin_url).poll()                   repeated reads, restart-aware

Every way the first contact can fail is an InputError naming the fix (exit 2): the server
unreachable or not SGLang, no plugin advertised and no --plugin-url, the plugin unreachable,
a refused token, a plugin without /step_samples (an older kvctl on the server).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from engine_adapter.remote.http_fetch import Unreachable, http_get, normalize_base_url
from engine_adapter.step_samples import StepSample, decode_samples
from kvctl.errors import InputError, RuntimeFailure
from kvctl.record.client import ServerTarget

PLUGIN_FIX = "start the server with KVCTL_SGLANG_PLUGIN=1"


@dataclass(frozen=True, kw_only=True)
class SamplePage:
    timer_id: str
    first: int
    next: int
    samples: tuple[StepSample, ...]


def find_plugin(url: str, *, plugin_url: str | None = None,
                timeout_s: float = 5.0) -> ServerTarget:
    """The server at `url` and its plugin (`plugin_url`, else what /server_info advertises)."""
    from engine_adapter.remote.server_info import MalformedServerInfo, fetch_server_info

    base = normalize_base_url(url)
    try:
        info = fetch_server_info(base, timeout_s=timeout_s)
    except Unreachable as err:
        raise InputError(f"cannot reach the SGLang server ({err}): check --url") from None
    except MalformedServerInfo as err:
        raise InputError(
            f"{base} does not look like an SGLang server ({err}): check --url") from None
    found = plugin_url or info.plugin_url
    if not found:
        raise InputError(f"{base} advertises no kvctl plugin in /server_info: {PLUGIN_FIX}, "
                         "or pass --plugin-url")
    plugin = normalize_base_url(found, what="--plugin-url")
    return ServerTarget(server_url=base, plugin_url=plugin, model=info.model,
                        page_size=info.page_size, dp_size=info.dp_size, version=info.version)


def collect_samples(plugin_url: str, since: int = 0, *, token: str | None = None,
                    timeout_s: float = 5.0) -> SamplePage:
    """One read of `/step_samples?since=N`. InputError for an answer that names a fix,
    RuntimeFailure for a malformed one, Unreachable when nothing answered."""
    url = f"{plugin_url}/step_samples?{urllib.parse.urlencode({'since': since})}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    status, body = http_get(url, timeout_s=timeout_s, headers=headers)
    if status in (401, 403):
        raise InputError(f"the kvctl plugin at {plugin_url} refused the token (HTTP {status}): "
                         "pass --plugin-token, the server's KVCTL_PLUGIN_TOKEN")
    if status == 404 and b"KVCTL_PLUGIN_STEP_TIMING" in body:
        raise InputError(f"{plugin_url}: {json.loads(body)['error']}")
    if status == 404:
        raise InputError(f"{plugin_url} serves no /step_samples: the kvctl plugin there predates "
                         "step timing (install this kvctl on the server) or --plugin-url points "
                         "elsewhere")
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if status != 200 or not isinstance(doc, dict):
        raise RuntimeFailure(f"{url} answered HTTP {status}" + ("" if doc else ", not JSON"))
    try:
        return SamplePage(timer_id=str(doc["timer_id"]), first=int(doc["first"]),
                          next=int(doc["next"]),
                          samples=decode_samples(doc["samples"], where=url))
    except (KeyError, TypeError, ValueError) as err:
        raise RuntimeFailure(f"{url}: malformed body ({type(err).__name__}: {err})") from None


class SampleCollector:
    """Accumulates samples across polls: from the plugin's current position (or, with
    `history`, from what its ring still holds). A restarted server (new `timer_id`) is
    followed from its first sample; samples the ring dropped between polls are counted."""

    def __init__(self, plugin_url: str, *, token: str | None = None, history: bool = False,
                 timeout_s: float = 5.0) -> None:
        self.plugin_url, self.token, self.timeout_s = plugin_url, token, timeout_s
        self.samples: list[StepSample] = []
        self.lost = 0
        self.restarts = 0
        try:
            first = collect_samples(plugin_url, 0, token=token, timeout_s=timeout_s)
        except Unreachable as err:
            raise InputError(f"cannot reach the kvctl plugin ({err}): {PLUGIN_FIX}, or fix "
                             "--plugin-url") from None
        self.timer_id = first.timer_id
        self.since = first.next
        if history:
            self.samples.extend(first.samples)

    def poll(self) -> int:
        """One read; returns the number of new samples. Raises Unreachable (the caller
        decides how long to wait) and RuntimeFailure."""
        page = collect_samples(self.plugin_url, self.since, token=self.token,
                               timeout_s=self.timeout_s)
        if page.timer_id != self.timer_id:  # the server restarted: numbers start again
            self.restarts += 1
            self.timer_id, self.since = page.timer_id, 0
            page = collect_samples(self.plugin_url, 0, token=self.token, timeout_s=self.timeout_s)
        self.lost += max(0, page.first - self.since)
        self.samples.extend(page.samples)
        self.since = page.next
        return len(page.samples)

    def run(self, *, duration_s: float | None, max_samples: int | None, interval_s: float = 1.0,
            on_progress: Callable[[int, float], None] | None = None,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> None:
        """Poll until `duration_s` elapsed or `max_samples` collected (Ctrl-C stops early)."""
        started = clock()
        try:
            while True:
                self.poll()
                elapsed = clock() - started
                if on_progress is not None:
                    on_progress(len(self.samples), elapsed)
                if max_samples is not None and len(self.samples) >= max_samples:
                    break
                if duration_s is not None and elapsed >= duration_s:
                    break
                sleep(interval_s)
        except KeyboardInterrupt:
            pass
        except Unreachable as err:
            raise RuntimeFailure(f"the kvctl plugin stopped answering ({err}) after "
                                 f"{len(self.samples)} samples") from None
        if max_samples is not None:
            del self.samples[max_samples:]

"""One `kvctl record` run: poll the plugin until a stop condition, keep counts, never lose
what was received.

Stop conditions, whichever comes first: `duration_s` elapsed, `max_requests` records
received, Ctrl-C (KeyboardInterrupt inside `run`), or the plugin unreachable for
`grace_s` in a row (then `lost` names why). After any of them `run` polls once more so that
records already finished on the server are not left behind (skipped after Ctrl-C if the
plugin does not answer at once).

Counts (`Progress`): requests, prompt tokens, distinct blocks (distinct salted digests),
dropped since the run started (the server's counter is cumulative), requests in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from engine_adapter.recording.recorder import TrafficRecord
from engine_adapter.remote.http_fetch import Unreachable
from kvctl.errors import InputError, RuntimeFailure
from kvctl.record.client import RecordsClient, RecordsPage


@dataclass(frozen=True, kw_only=True)
class Progress:
    elapsed_s: float
    requests: int
    prompt_tokens: int
    distinct_blocks: int
    dropped: int
    in_flight: int
    unreachable: bool


class RecordingSession:
    """Accumulates pages from one client. Single-threaded: `run` owns the loop."""

    def __init__(self, client: RecordsClient, first: RecordsPage, *,
                 duration_s: float | None, max_requests: int | None,
                 interval_s: float = 0.5, grace_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.records: list[TrafficRecord] = []
        self.interrupted = False
        self.lost: str | None = None  # why the plugin stopped answering, if it did
        self.restarts = 0
        self.hook_errors = 0
        self._duration_s, self._max = duration_s, max_requests
        self._interval_s, self._grace_s = interval_s, grace_s
        self._clock, self._sleep = clock, sleep
        self._started = clock()
        self._blocks: set[bytes] = set()
        self._prompt_tokens = 0
        self._dropped_base = first.dropped
        self._dropped_seen = 0  # dropped in earlier recordings of this run (restarts)
        self._recording_id = first.recording_id
        self._last: RecordsPage = first
        self._unreachable_since: float | None = None
        self._take(first)

    @property
    def dropped(self) -> int:
        return self._dropped_seen + self._last.dropped - self._dropped_base

    @property
    def reached_max(self) -> bool:
        return self._full()

    @property
    def in_flight(self) -> int:
        return self._last.in_flight

    def progress(self) -> Progress:
        return Progress(elapsed_s=self._clock() - self._started, requests=len(self.records),
                        prompt_tokens=self._prompt_tokens, distinct_blocks=len(self._blocks),
                        dropped=self.dropped, in_flight=self.in_flight,
                        unreachable=self._unreachable_since is not None)

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        """Poll until a stop condition (module docstring); returns normally on Ctrl-C."""
        try:
            while not self._should_stop():
                full = self._poll_once()
                if on_progress is not None:
                    on_progress(self.progress())
                if not full and not self._should_stop():
                    self._sleep(self._interval_s)
        except KeyboardInterrupt:
            self.interrupted = True
        try:
            if self.lost is None and not self._full():
                while self._poll_once():  # drain what finished before the stop
                    pass
        except KeyboardInterrupt:  # a second Ctrl-C: write what we have
            self.interrupted = True
        if on_progress is not None:
            on_progress(self.progress())

    def _should_stop(self) -> bool:
        if self.lost is not None or self._full():
            return True
        return self._duration_s is not None and self._clock() - self._started >= self._duration_s

    def _full(self) -> bool:
        return self._max is not None and len(self.records) >= self._max

    def _poll_once(self) -> bool:
        """One poll; True when the page was full (more may be waiting)."""
        try:
            page = self.client.poll()
        except Unreachable as err:
            now = self._clock()
            if self._unreachable_since is None:
                self._unreachable_since = now
            elif now - self._unreachable_since >= self._grace_s:
                self.lost = f"the plugin stopped answering for {self._grace_s:.0f} s ({err})"
            return False
        except InputError as err:  # recording turned off, token revoked: stop, keep data
            self.lost = str(err)
            return False
        except RuntimeFailure as err:
            self.lost = str(err)
            return False
        self._unreachable_since = None
        if page.recording_id != self._recording_id:  # the server restarted
            self.restarts += 1
            self._dropped_seen += self._last.dropped - self._dropped_base
            self._dropped_base = 0
            self._recording_id = page.recording_id
        self._last = page
        self._take(page)
        return len(page.records) >= self.client.limit and not self._full()

    def release(self) -> None:
        """Acknowledge the last page kept (call once it is on disk), best effort: the
        server may free those records now. Records past --max-requests are not acked."""
        try:
            self.client.poll(limit=1)
        except (Unreachable, InputError, RuntimeFailure):
            pass

    def _take(self, page: RecordsPage) -> None:
        self.hook_errors = max(self.hook_errors, page.errors)
        for record in page.records:
            if self._full():
                self.client.ack = self.records[-1].seq if self.records else 0
                break
            self.records.append(record)
            self._prompt_tokens += record.input_length
            self._blocks.update(record.blocks)

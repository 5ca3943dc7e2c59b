"""`RecordingTap`: the scheduler-side hooks of `kvctl record`, fed with SGLang's own `Req`s.

The kvctl SGLang plugin calls, in the scheduler's thread:

    tap = RecordingTap.from_env()            # once, when the plugin captures the scheduler
    tap.on_request_arrival(req)              # a new Req joins the waiting queue
    tap.on_request_finish(req)               # a Req finished (output complete, or aborted)
    tap.on_request_abort(req)                # a Req was aborted before it finished

and the plugin's HTTP thread serves `tap.read(...)` through `route.records_response`.

What a hook reads from a `Req` (sglang/srt/managers/schedule_batch.py): `rid`,
`origin_input_ids` (only to hash them, never kept), `extra_key`, `cache_salt` and `lora_id`
(hashed into the chain's seed: SGLang never shares a prefix across them), `output_ids`
(only its length) and `finished_reason` (a FINISH_ABORT is not part of the trace).

Contract: a hook never raises into the server and never waits on the reader. Any exception
is caught and counted in `errors`; after `max_errors` of them the tap turns itself off
(`disabled_reason` says why) rather than cost the server on every request. Enabled only by
`KVCTL_RECORD=1`; `KVCTL_RECORD_BLOCK_TOKENS` sets the block size, by default the server's
page size: the radix cache shares whole pages, so page blocks lose no sharing, and a reader
can coarsen them to any multiple (kvctl record --block-tokens 512 for Mooncake's blocks).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engine_adapter.recording.block_hasher import DEFAULT_BLOCK_TOKENS, BlockHasher
from engine_adapter.recording.recorder import RecordBatch, TrafficRecorder

logger = logging.getLogger(__name__)

ENV_ENABLE = "KVCTL_RECORD"
ENV_BLOCK_TOKENS = "KVCTL_RECORD_BLOCK_TOKENS"
MAX_ERRORS = 100


class RecordingTap:
    """Owns one recording (one salt, one TrafficRecorder) for one scheduler process.

    Arrival time, in seconds (only differences matter: the writer makes them relative to
    the first arrival): `clock()` when a clock is given (a virtual clock in tests and the
    embedded engine); otherwise the API server's `time_stats.created_time`, which SGLang
    propagates to the scheduler's Req (time.perf_counter, system-wide CLOCK_MONOTONIC on
    Linux, so comparable across the server's processes), else perf_counter at the hook.
    `enabled` False makes every hook a no-op and `disabled_reason` says why.
    """

    def __init__(self, *, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 clock: Callable[[], float] | None = None, capacity: int = 65_536,
                 max_pending: int = 65_536, max_errors: int = MAX_ERRORS,
                 salt: bytes | None = None, enabled: bool = True,
                 disabled_reason: str | None = None) -> None:
        self.recorder = TrafficRecorder(BlockHasher(block_tokens=block_tokens, salt=salt),
                                        capacity=capacity, max_pending=max_pending)
        self.block_tokens = block_tokens
        self.recording_id = secrets.token_hex(8)  # tells a reader that the server restarted
        self.errors = 0
        self.enabled = enabled
        self.disabled_reason = disabled_reason if not enabled else None
        self._clock = clock
        self._max_errors = max_errors

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 page_size: int | None = None, **kwargs: Any) -> RecordingTap:
        """A tap configured from the environment; disabled (never raising) unless
        KVCTL_RECORD=1 and KVCTL_RECORD_BLOCK_TOKENS, if set, is a positive integer.
        Unset, the block is `page_size` (the scheduler's), else Mooncake's 512."""
        env = os.environ if environ is None else environ
        if env.get(ENV_ENABLE, "").strip() != "1":
            return cls(enabled=False, disabled_reason=(
                f"recording is off: start the server with {ENV_ENABLE}=1"), **kwargs)
        raw = env.get(ENV_BLOCK_TOKENS, "").strip()
        block_tokens = page_size if page_size and page_size > 0 else DEFAULT_BLOCK_TOKENS
        if raw:
            try:
                block_tokens = int(raw)
            except ValueError:
                block_tokens = 0
            if block_tokens <= 0:
                return cls(enabled=False, disabled_reason=(
                    f"recording is off: {ENV_BLOCK_TOKENS}={raw!r} is not a positive integer; "
                    f"restart the server with {ENV_BLOCK_TOKENS}={DEFAULT_BLOCK_TOKENS}"), **kwargs)
        return cls(block_tokens=block_tokens, **kwargs)

    # ---- hooks (scheduler thread) ------------------------------------------------------

    def on_request_arrival(self, req: Any) -> None:
        """Hash the prompt of a newly arrived Req and remember it until it finishes."""
        if not self.enabled:
            return
        try:
            arrival_s = self._clock() if self._clock is not None else _created_s(req)
            self.recorder.on_arrival(str(req.rid), _token_array(req.origin_input_ids),
                                     float(arrival_s), namespace=_namespace(req))
        except Exception as err:  # never into the server
            self._failed("arrival", err)

    def on_request_finish(self, req: Any) -> None:
        """Complete the record of a finished Req (an aborted one is discarded)."""
        if not self.enabled:
            return
        try:
            if _aborted(req):
                self.recorder.on_abort(str(req.rid))
            else:
                self.recorder.on_finish(str(req.rid), len(req.output_ids))
        except Exception as err:
            self._failed("finish", err)

    def on_request_abort(self, req: Any) -> None:
        """Forget a Req that ended without finishing (client abort, out of memory)."""
        if not self.enabled:
            return
        try:
            self.recorder.on_abort(str(req.rid))
        except Exception as err:
            self._failed("abort", err)

    # ---- reader (endpoint thread) ------------------------------------------------------

    def read(self, *, ack: int = 0, limit: int = 4096) -> RecordBatch:
        """Release records up to `ack`, return the next `limit` (never blocks the hooks
        beyond the recorder's short lock)."""
        return self.recorder.read(ack=ack, limit=limit)

    def _failed(self, where: str, err: Exception) -> None:
        self.errors += 1
        if self.errors == 1:
            logger.warning("kvctl recording: %s hook failed (%s); counted, server unaffected",
                           where, type(err).__name__)
        if self.errors >= self._max_errors:
            self.enabled = False
            self.disabled_reason = (f"recording turned itself off after {self.errors} hook "
                                    f"errors (last: {type(err).__name__} at {where})")
            logger.warning("kvctl recording: %s", self.disabled_reason)


def _token_array(ids: Any) -> np.ndarray:
    """SGLang's `array('q')` without a copy; lists and numpy arrays as int64."""
    if getattr(ids, "typecode", None) == "q":
        return np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, np.int64)
    return np.asarray(ids, dtype=np.int64)


def _created_s(req: Any) -> float:
    """When the API server created the request (SGLang's req_time_stats), else now."""
    created = getattr(getattr(req, "time_stats", None), "created_time", 0.0)
    return created if isinstance(created, float) and created > 0.0 else time.perf_counter()


def _namespace(req: Any) -> bytes:
    """The parts of SGLang's radix key beyond the tokens (RadixKey's extra_key, the
    cache_salt, the LoRA id); empty for the common single-namespace server."""
    parts = (getattr(req, "extra_key", None), getattr(req, "cache_salt", None),
             getattr(req, "lora_id", None))
    if not any(parts):
        return b""
    return "\x1f".join("" if p is None else str(p) for p in parts).encode("utf-8")


def _aborted(req: Any) -> bool:
    """SGLang's FINISH_ABORT, by name: the hooks import nothing from SGLang."""
    reason = getattr(req, "finished_reason", None)
    return reason is not None and type(reason).__name__ == "FINISH_ABORT"

"""Drive a live SGLang server with a trace at its arrival times and measure each request.

Every request is a streaming `POST /generate` with `input_ids` (prompts.py),
`max_new_tokens = output_length` and `ignore_eos`, sent at `arrival_s / speedup` after the
start, concurrently (one asyncio task per request, one connection each, no client-side
cap), so the server sees the trace's own overlap:

    t=0 start ── sleep to arrival/speedup ── POST ── first chunk ── ... ── last chunk
                                             |<---- ttft ---->|
                                             |<------------- e2e ----------------->|

Requests due at the same instant reach the server (or a router) in trace order: each waits,
after its arrival time, until the request before it in (arrival, line) order has its
response headers (SGLang answers them when the request is accepted, before the first token;
a router only after it picked the worker), at most ORDER_WAIT_S after that one was sent. Without that, equal
timestamps race on their connections and a round-robin router deals them in no fixed order
(the fleet twin saw 149/139 requests per worker against a predicted 145/143).

Per request it keeps SGLang's own `meta_info.cached_tokens` and `completion_tokens` from the
last chunk, TTFT (the server's `first_token_latency` when the server runs with
--enable-metrics, else the client's time to the first chunk) and the end-to-end latency
(`e2e_latency`, else the client's). A request the server refuses (HTTP 400, or an error
chunk) is kept as `rejected` with SGLang's message. `sglang:evicted_tokens_total` is read
from /metrics before and after (None when the server exports no metrics; 0 while the
series is absent from metrics that are on, as SGLang creates it at the first eviction).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvctl.replay.mooncake import MooncakeRecord
from kvctl.twin.prompts import BlockVocabulary

EVICTED = "sglang:evicted_tokens_total"
ORDER_WAIT_S = 0.25  # the longest a request waits for the one before it to be accepted


@dataclass(frozen=True, kw_only=True)
class Measured:
    """One request as the server served it (times in seconds from the drive's start)."""

    line: int  # the trace line
    prompt_tokens: int
    sent_s: float
    output_tokens: int = 0
    cached_tokens: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    finished_s: float | None = None
    rejected: str | None = None  # SGLang's reason, first line, when it refused
    ttft_from_server: bool = False  # meta_info.first_token_latency (else the client's)
    rid: str | None = None  # the id sent in the body (a fleet drive: who served it)
    error: str | None = None  # the request failed without SGLang's answer (a dead worker)


@dataclass(frozen=True, kw_only=True)
class DriveResult:
    requests: tuple[Measured, ...]
    evicted_tokens: int | None  # the counter's delta over the drive; None: not observable
    ttft_source: str  # "server first_token_latency" | "client first chunk"
    wall_s: float


def drive(url: str, records: Iterable[MooncakeRecord], vocabulary: BlockVocabulary, *,
          speedup: float = 1.0, timeout_s: float = 600.0,
          on_done: Callable[[int], None] | None = None, form: RequestForm | None = None,
          metrics_urls: list[str] | None = None,
          on_send: Callable[[int], None] | None = None) -> DriveResult:
    """Send every record (module docstring); returns when the last has answered.
    form: how a prompt is sent (None: `input_ids`, no rid); metrics_urls: where the
    eviction counter is read (default `url`; a fleet: every worker, summed); on_send(line):
    called in the event loop just before each request is sent, in send order (a blocking
    hook holds every send: holdout.py's mark)."""
    records = list(records)
    form = form or RequestForm()
    scraped = metrics_urls or [url]
    before = _evicted_sum(scraped)
    started = time.monotonic()
    measured = asyncio.run(_drive(url, records, vocabulary, speedup, timeout_s, on_done, form,
                                  on_send))
    wall = time.monotonic() - started
    time.sleep(1.0)  # the counter moves in the scheduler; let its last update land
    after = _evicted_sum(scraped)
    evicted = None if before is None or after is None else after - before
    served = [m for m in measured if m.rejected is None]
    from_server = sum(m.ttft_from_server for m in served)
    source = ("server first_token_latency" if served and from_server == len(served)
              else "client first chunk" if from_server == 0 else "mixed")
    return DriveResult(requests=tuple(measured), evicted_tokens=evicted, ttft_source=source,
                       wall_s=wall)


async def _drive(url, records, vocabulary, speedup, timeout_s, on_done,
                 form: RequestForm, on_send) -> list[Measured]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    done = 0
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        origin = time.monotonic()
        sent = [asyncio.Event() for _ in records]
        accepted = [asyncio.Event() for _ in records]
        before = _predecessors(records)

        async def one(index: int, record: MooncakeRecord) -> Measured:
            nonlocal done
            delay = origin + record.arrival_s / speedup - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                if (previous := before[index]) is not None:
                    await sent[previous].wait()  # set after a bounded wait of its own
                    try:
                        await asyncio.wait_for(accepted[previous].wait(), ORDER_WAIT_S)
                    except asyncio.TimeoutError:
                        pass  # the one before is slow to be accepted: send anyway
                if on_send is not None:
                    on_send(record.line)
            finally:
                sent[index].set()  # whatever happened here, the next one is not held by it
            try:
                result = await _request(session, url, record, vocabulary, origin, form,
                                        accepted[index])
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as err:
                if not form.keep_going:
                    raise
                result = Measured(line=record.line, prompt_tokens=record.input_length,
                                  sent_s=record.arrival_s / speedup, rid=form.rid(record),
                                  error=f"{type(err).__name__}: {err}"[:160])
            finally:
                accepted[index].set()
            done += 1
            if on_done is not None:
                on_done(done)
            return result

        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(records))))


def _predecessors(records: list[MooncakeRecord]) -> list[int | None]:
    """For each record, the index of the record sent just before it in (arrival, line)
    order, None for the first: the order the drive keeps at equal arrival times."""
    order = sorted(range(len(records)), key=lambda i: (records[i].arrival_s, records[i].line))
    before: list[int | None] = [None] * len(records)
    for previous, index in zip(order, order[1:]):
        before[index] = previous
    return before


async def _request(session, url: str, record: MooncakeRecord, vocabulary: BlockVocabulary,
                   origin: float, form: RequestForm, accepted: asyncio.Event) -> Measured:
    """One request; `accepted` is set when the response headers arrive (the next request
    in trace order may go)."""
    body = {**form.prompt(vocabulary.prompt(record.hash_ids, record.input_length)),
            "sampling_params": {"max_new_tokens": record.output_length, "ignore_eos": True,
                                "temperature": 0.0},
            "stream": True}
    rid = form.rid(record)
    if rid is not None:
        body["rid"] = rid
    sent = time.monotonic()
    base = {"line": record.line, "prompt_tokens": record.input_length, "sent_s": sent - origin,
            "rid": rid}
    first: float | None = None
    meta: dict = {}
    async with session.post(f"{url}/generate", json=body) as response:
        accepted.set()
        if response.status != 200:
            return Measured(**base, rejected=_reason(await response.text(), response.status))
        buffer = b""
        async for piece in response.content.iter_any():
            buffer += piece
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                payload = event.strip().removeprefix(b"data:").strip()
                if not payload or payload == b"[DONE]":
                    continue
                chunk = json.loads(payload)
                if "error" in chunk:
                    return Measured(**base, rejected=_reason(json.dumps(chunk), 200))
                if first is None:
                    first = time.monotonic()
                meta = chunk.get("meta_info") or meta
    end = time.monotonic()
    server_ttft = meta.get("first_token_latency")
    from_server = isinstance(server_ttft, (int, float))
    ttft = float(server_ttft) if from_server else None if first is None else first - sent
    e2e = meta.get("e2e_latency")
    return Measured(**base, output_tokens=int(meta.get("completion_tokens") or 0),
                    cached_tokens=_int_or_none(meta.get("cached_tokens")), ttft_s=ttft,
                    ttft_from_server=from_server,
                    e2e_s=float(e2e) if isinstance(e2e, (int, float)) else end - sent,
                    finished_s=end - origin)


def _reason(text: str, status: int) -> str:
    """SGLang's error message, one line, at most 160 characters."""
    try:
        document = json.loads(text)
        error = document.get("error", document) if isinstance(document, dict) else document
        message = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        message = text
    line = " ".join(str(message).split())
    return f"HTTP {status}: {line[:160]}"


@dataclass(frozen=True, kw_only=True)
class RequestForm:
    """How the drive sends a prompt. text: a renderer of ids to the request text (the
    sandbox's one-character-per-id tokenizer, kvctl/sandbox/tokenizer.py), else `input_ids`;
    rid_prefix: send `rid = <prefix><line>` so the worker that served it can be found
    (kvctl/twin/served.py); keep_going: a request that fails without SGLang's answer (a
    worker died) is kept as `error` and the drive goes on."""

    text: Callable[[list[int]], str] | None = None
    rid_prefix: str | None = None
    keep_going: bool = False

    def prompt(self, ids: list[int]) -> dict:
        return {"text": self.text(ids)} if self.text is not None else {"input_ids": ids}

    def rid(self, record: MooncakeRecord) -> str | None:
        return None if self.rid_prefix is None else f"{self.rid_prefix}{record.line}"


def _evicted_sum(urls: list[str]) -> int | None:
    """The eviction counter summed over `urls`; None when any is not observable."""
    values = [_evicted(u) for u in urls]
    return None if any(v is None for v in values) else sum(values)


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _evicted(url: str) -> int | None:
    from engine_adapter.remote.http_fetch import Unreachable
    from engine_adapter.remote.metrics_scrape import MetricsUnavailable, scrape_metrics

    try:
        reading = scrape_metrics(url, timeout_s=10.0)
    except (Unreachable, MetricsUnavailable):
        return None
    if not reading.samples:  # no sglang:* at all: started without --enable-metrics
        return None
    # SGLang's radix-cache collector creates the labelled series at the first eviction
    # (update_eviction_metrics increments only num_evicted > 0): absent means none yet
    return reading.count(EVICTED) or 0

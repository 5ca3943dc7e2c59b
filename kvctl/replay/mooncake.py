"""Mooncake-format JSONL traces: parse, summarize, expand hash blocks into token ids, drive.

One line per request (kvcache-ai/Mooncake `FAST25-release/traces/`):

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

`timestamp` is the arrival in milliseconds; `hash_ids` are remapped prefix-block hashes over
512-token blocks (or the `block_tokens` of a recording's sidecar, trace_blocks.py; read 512
below as that): equal ids mean reusable prefix K/V. Each id b becomes one deterministic
block of synthetic token ids, so equal ids share a prefix in SGLang's radix tree and
different ids never collide:

    block(b) = [1 + 512 b, 2 + 512 b, ..., 512 + 512 b]          (all < 2^30)

    hash_ids:  [ b0          | b1          | ... | b(n-1)      ]
    tokens:    [ block(b0)   | block(b1)   | ... | block(b(n-1))[:tail] ]
               0             512           1024  512(n-1)      input_length
    tail = input_length - 512 (n - 1), in [1, 512]: the last block is partial

Token id 0 is never used (SGLang pads with it); the engine's synthetic output ids live in
[2^30, 2^31), so a request's output never collides with any prompt block.

Reading is lazy: `iter_records` yields one record at a time and `MooncakeDriver` submits
arrivals a window ahead of the engine's virtual clock, so a 12k-request trace never holds
all prompts in memory. `scan_trace` validates every line first (a malformed line fails
before anything runs) and returns the totals a replay needs to size an unbounded pool.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_adapter.embedded.page_hashes import BLOCK_TOKENS, BlockPrompt, expand_blocks
from engine_adapter.embedded.requests import RequestSpec
from kvctl.errors import InputError
from kvctl.replay.trace_blocks import recorded_page_size, trace_block_tokens
from kvctl.util.inputs import check_input_file, decode_line
from kvctl.util.pages import ceil_div

MAX_HASH_ID = ((1 << 30) - 1) // BLOCK_TOKENS - 1  # keeps 1 + 512 b + 511 < 2^30


def max_hash_id(block_tokens: int) -> int:
    """The largest id whose block stays below 2^30: 1 + B b + (B - 1) < 2^30."""
    return ((1 << 30) - 1) // block_tokens - 1


@dataclass(frozen=True, kw_only=True)
class MooncakeRecord:
    """One validated trace line. `line` is 1-based, as editors count."""

    line: int
    arrival_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    block_tokens: int = BLOCK_TOKENS  # tokens per hash id (trace_blocks.py)

    @property
    def rid(self) -> str:
        return f"mc-{self.line}"


@dataclass(frozen=True, kw_only=True)
class TraceSummary:
    """Totals over the (limited) trace, from one validating pass."""

    requests: int
    prompt_tokens: int
    output_tokens: int
    max_request_tokens: int
    last_arrival_s: float
    distinct_blocks: int = 0  # distinct hash ids (prefix blocks) over the trace
    block_tokens: int = BLOCK_TOKENS  # tokens per hash id

    def oracle_pages(self, page_size: int) -> int:
        """A bound, from above, on the distinct pages the content oracle remembers for a
        replay of this trace (one namespace, one generation): every full prompt page lies in
        a hash-id block, and hash ids are prefix hashes (the same id at the same place is
        the same prefix), so prompt pages number at most 512 / page_size per distinct id;
        past the prompt, a request adds its output pages and at most one page straddling
        its prompt's end. Capped by every request's own pages. On the shipped trace:
        6,118,939 for the 5,910,231 pages remembered (3.5% over)."""
        per_block = max(self.block_tokens // page_size, 1)
        beyond = (self.output_tokens + self.requests * page_size) // page_size
        every = (self.prompt_tokens + self.output_tokens) // page_size + self.requests
        return min(self.distinct_blocks * per_block + beyond, every)

    def demand_tokens(self, page_size: int) -> int:
        """A pool that never has to evict: every request's input + output, each rounded up
        to whole pages (bounded above by adding page_size - 1 per request)."""
        total = self.prompt_tokens + self.output_tokens + self.requests * (page_size - 1)
        return total // page_size * page_size


def parse_line(text: str, *, path: str | Path, line: int,
               block_tokens: int = BLOCK_TOKENS) -> MooncakeRecord:
    """Parse and validate one line. Raises InputError naming `path:line` and the problem."""
    where = f"{path}:{line}"
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise InputError(f"{where}: expected a JSON object per line")
    fields = ("timestamp", "input_length", "output_length", "hash_ids")
    missing = [k for k in fields if k not in row]
    if missing:
        raise InputError(f"{where}: missing field(s) {', '.join(missing)}")
    timestamp = row["timestamp"]
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or timestamp < 0:
        raise InputError(f"{where}: timestamp must be a non-negative number of milliseconds")
    input_length = _positive_int(row["input_length"], "input_length", where)
    output_length = _positive_int(row["output_length"], "output_length", where)
    hash_ids = row["hash_ids"]
    largest = max_hash_id(block_tokens)
    if not isinstance(hash_ids, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= largest for b in hash_ids
    ):
        raise InputError(f"{where}: hash_ids must be a list of integers in [0, {largest}]")
    blocks = ceil_div(input_length, block_tokens)
    if len(hash_ids) != blocks:
        raise InputError(
            f"{where}: input_length {input_length} spans {blocks} blocks of {block_tokens} "
            f"but hash_ids has {len(hash_ids)}"
        )
    return MooncakeRecord(
        line=line, arrival_s=timestamp / 1000.0, input_length=input_length,
        output_length=output_length, hash_ids=tuple(hash_ids), block_tokens=block_tokens,
    )


def _positive_int(value: object, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


def iter_records(path: str | Path, *, limit: int | None = None,
                 block_tokens: int | None = None) -> Iterator[MooncakeRecord]:
    """Yield validated records in file order, lazily; blank lines are skipped.
    `block_tokens` None: the trace's own (its sidecar's, else 512; trace_blocks.py).

    Raises InputError for an unreadable file or sidecar, a malformed line, or timestamps
    that go backwards (arrivals must be in order for lazy submission).
    """
    if limit is not None and limit <= 0:
        raise InputError(f"--limit must be positive, got {limit}")
    check_input_file(path, what="trace")
    if block_tokens is None:
        block_tokens = trace_block_tokens(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed in finally; decoded per line
    except OSError as err:
        raise InputError(f"cannot read trace {path}: {err.strerror}") from None
    try:
        count = 0
        previous = 0.0
        for number, raw in enumerate(handle, start=1):
            text = decode_line(raw, path=path, line=number)
            if not text.strip():
                continue
            record = parse_line(text, path=path, line=number, block_tokens=block_tokens)
            if record.arrival_s < previous:
                raise InputError(
                    f"{path}:{number}: timestamp goes backwards (arrivals must be sorted)")
            previous = record.arrival_s
            yield record
            count += 1
            if limit is not None and count >= limit:
                return
    finally:
        handle.close()


def scan_trace(path: str | Path, *, limit: int | None = None) -> TraceSummary:
    """Validate the whole (limited) trace and total it. Raises InputError on the first bad line
    or an empty trace."""
    requests = prompt = output = largest = 0
    last = 0.0
    blocks: set[int] = set()
    block_tokens = trace_block_tokens(path)
    for record in iter_records(path, limit=limit, block_tokens=block_tokens):
        requests += 1
        blocks.update(record.hash_ids)
        prompt += record.input_length
        output += record.output_length
        largest = max(largest, record.input_length + record.output_length)
        last = record.arrival_s
    if requests == 0:
        raise InputError(f"{path}: the trace holds no requests")
    return TraceSummary(requests=requests, prompt_tokens=prompt, output_tokens=output,
                        max_request_tokens=largest, last_arrival_s=last,
                        distinct_blocks=len(blocks), block_tokens=block_tokens)


def prompt_tokens(record: MooncakeRecord) -> np.ndarray:
    """The record's synthetic prompt: block(b) for each hash id, cut at input_length."""
    return expand_blocks(record.hash_ids, record.input_length, record.block_tokens)


def to_spec(record: MooncakeRecord, *, origin_s: float = 0.0, rid_prefix: str = "") -> RequestSpec:
    """One engine request per trace line: no session, no namespace (single tenant). Its
    prompt is a `BlockPrompt` (expanded when the engine first examines the request, so a
    long waiting queue holds block ids, not tokens), and its hash ids ride along so the
    content oracle hashes pages from them, not from the tokens.
    origin_s / rid_prefix shift a replay that starts again on a warm engine (a live run)."""
    return RequestSpec(rid=rid_prefix + record.rid,
                       tokens=BlockPrompt(record.hash_ids, record.input_length,
                                          record.block_tokens),
                       max_new_tokens=record.output_length, arrival_s=origin_s + record.arrival_s,
                       block_ids=record.hash_ids)


class MooncakeDriver:
    """`WorkloadDriver` for a Mooncake trace: submits arrivals lazily, `window_s` ahead.

    Invariant kept after `prime` and every `after_step`: while records remain, at least one
    submitted arrival lies in the engine's future, so an idle engine can advance its clock
    to it (engine_adapter.workload contract). Mutates only the engine's queue (submit).
    """

    def __init__(self, path: str | Path, *, limit: int | None = None, window_s: float = 2.0,
                 summary: TraceSummary | None = None) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.summary = summary
        # a recording replays at its server's page size unless --page-size says otherwise
        page = recorded_page_size(path)
        self.engine_defaults: dict = {"page_size": page} if page is not None else {}
        self._window_s = window_s
        self._records = iter_records(path, limit=limit)
        self._next: MooncakeRecord | None = next(self._records, None)
        self._last_submitted_s = -1.0
        self.submitted = 0
        self.sid_prefix = ""  # set by a live run that replays the trace again
        self._origin_s = 0.0

    def prime(self, engine) -> None:
        """Arrivals are relative to the engine's clock now (0 for a fresh engine)."""
        self._origin_s = engine.clock_s
        self._last_submitted_s = self._origin_s - 1.0
        self._feed(engine, self._origin_s)

    def after_step(self, engine, report) -> None:
        self._feed(engine, report.clock_s)

    def exhausted(self) -> bool:
        return self._next is None

    def total_hint(self) -> int | None:
        return self.summary.requests if self.summary is not None else None

    def _feed(self, engine, clock_s: float) -> None:
        """Submit every arrival up to clock + window, and at least one beyond the clock."""
        horizon = clock_s + self._window_s
        while self._next is not None and (
            self._origin_s + self._next.arrival_s <= horizon or self._last_submitted_s <= clock_s
        ):
            engine.submit(to_spec(self._next, origin_s=self._origin_s, rid_prefix=self.sid_prefix))
            self._last_submitted_s = self._origin_s + self._next.arrival_s
            self.submitted += 1
            self._next = next(self._records, None)

"""The page-access stream a radix prefix cache sees, built from a Mooncake trace.

Each request, in arrival order, looks up its prompt's full pages (SGLang's match), then
inserts them and the pages of its output (SGLang inserts the whole committed sequence when
the request finishes; distance.py fixes the order of the touches). Output pages hold
synthetic ids no other prompt contains, so they are never hit; they still take cache
room, which is why they are in the stream. The stream has no clock: in arrival order they
are inserted right with the prompt (distance.py); a replay's schedule (schedule.py) says
when each request was really matched, inserted and finished (scheduled.py), by `rids`.

    request r:  prompt S tokens, output O tokens, page P
    accesses:   [ prompt page 0 .. floor(S/P)-1 | output pages ]
                  |<- matchable: floor((S-1)/P) ->|             SGLang caps a match at S-1
                                                                tokens (schedule_batch.py,
                                                                _compute_max_prefix_len), then
                                                                page-aligns it
    output pages = floor((S+O-1)/P) - floor(S/P)   (the committed sequence is S+O-1 tokens:
                  the last sampled token has no K/V; the page straddling the prompt's end
                  holds output tokens, so it is new)

Page identity is the prompt's prefix hash at each page boundary (`PrefixHasher`, the
content oracle's polynomial hash: equal prefixes, equal keys), computed from block ids
without expanding tokens. Keys stay in memory, never in a report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_adapter.embedded.page_hashes import BLOCK_TOKENS, PrefixHasher
from kvctl.errors import InputError
from kvctl.replay.mooncake import iter_records

HASH_BASE = 0x9E3779B97F4A7C15  # fixed: the keys never leave the process


@dataclass(frozen=True, kw_only=True)
class PageStream:
    """Accesses in order. Request r's accesses are keys[starts[r]:starts[r+1]]; its first
    `matchable[r]` accesses are prompt pages a match may return."""

    page_size: int
    keys: np.ndarray  # uint64 per access
    starts: np.ndarray  # int64, requests + 1 entries
    matchable: np.ndarray  # int64 per request
    prompt_tokens: int  # every prompt token, cacheable or not (the hit rate's denominator)
    arrival_s: np.ndarray | None = None  # float64 per request, the trace's clock
    rids: tuple[str, ...] = ()  # the replay's request ids, per request
    full_pages: np.ndarray | None = None  # int64 per request: the full prompt pages
    input_tokens: np.ndarray | None = None  # int64 per request: prompt tokens (S)
    output_tokens: np.ndarray | None = None  # int64 per request: output tokens (O)

    @property
    def prompt_pages(self) -> np.ndarray:
        """Full prompt pages per request (its accesses before its output pages; a stream
        built without them: the matchable pages)."""
        return self.full_pages if self.full_pages is not None else self.matchable

    @property
    def requests(self) -> int:
        return len(self.starts) - 1

    @property
    def accesses(self) -> int:
        return len(self.keys)


def mooncake_stream(path: str | Path, *, page_size: int, limit: int | None = None,
                    outputs: bool = True) -> PageStream:
    """The stream of a Mooncake trace. outputs=False leaves output pages out (their room in
    the cache is then ignored). Raises InputError for a bad trace or a page size that does
    not divide a 512-token block."""
    if page_size <= 0 or BLOCK_TOKENS % page_size:
        raise InputError(f"--curve needs a page size dividing {BLOCK_TOKENS}, got {page_size}")
    hasher = PrefixHasher(page_size, HASH_BASE)
    chunks: list[np.ndarray] = []
    starts = [0]
    matchable: list[int] = []
    full: list[int] = []
    arrivals: list[float] = []
    rids: list[str] = []
    sizes: list[int] = []
    outs: list[int] = []
    prompt_tokens = 0
    fresh = np.uint64(1) << np.uint64(63)  # output keys: top bit set, a counter below
    next_output = 0
    for record in iter_records(path, limit=limit):
        size, out = record.input_length, record.output_length
        prompt = hasher.block_hashes(record.hash_ids, size)
        prompt &= ~fresh  # prompt keys keep the top bit clear
        extra = (size + out - 1) // page_size - size // page_size if outputs else 0
        chunks.append(prompt)
        if extra > 0:
            chunks.append(fresh | np.arange(next_output, next_output + extra, dtype=np.uint64))
            next_output += extra
        starts.append(starts[-1] + len(prompt) + max(extra, 0))
        matchable.append((size - 1) // page_size)
        full.append(len(prompt))
        arrivals.append(record.arrival_s)
        rids.append(record.rid)
        sizes.append(size)
        outs.append(out)
        prompt_tokens += size
    keys = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.uint64)
    return PageStream(page_size=page_size, keys=keys, starts=np.asarray(starts, dtype=np.int64),
                      matchable=np.asarray(matchable, dtype=np.int64), prompt_tokens=prompt_tokens,
                      full_pages=np.asarray(full, dtype=np.int64),
                      arrival_s=np.asarray(arrivals, dtype=np.float64), rids=tuple(rids),
                      input_tokens=np.asarray(sizes, dtype=np.int64),
                      output_tokens=np.asarray(outs, dtype=np.int64))

"""What a workload submits to the embedded engine, and what it gets back.

`RequestSpec` is the driver's view of one model call: its full prompt (for a later turn of
a session: the previous context, the previous output, then the new observation), its
namespace, and what to do with its K/V when it finishes and the session waits on a tool.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

import numpy as np

from engine_adapter.embedded.page_hashes import BLOCK_TOKENS, BlockPrompt, PageChain


@dataclass(frozen=True, kw_only=True)
class RequestSpec:
    """One request. Token ids stay inside the engine: never logged or exported.

    retention: what happens to this request's K/V after it finishes, while its session
      waits for the next turn: "retain" (path stays locked), "drop" (path becomes
      evictable), "offload" (copied to the host tier; reloaded instead of recomputed when
      evicted meanwhile). None: the engine's default. Ignored when `session` is None.
    namespace: the cache namespace it asks to read (default: its tenant's own).
    block_ids: set when `tokens` is exactly `page_hashes.expand_blocks(block_ids,
      len(tokens), B)` (a Mooncake trace line; B is the `BlockPrompt`'s block size, 512
      otherwise); lets the content oracle hash pages from the
      ids instead of the tokens. None: hash the tokens.
    """

    rid: str
    tokens: np.ndarray | BlockPrompt  # int64 prompt token ids (array-like: len, np.asarray)
    max_new_tokens: int
    arrival_s: float = 0.0
    tenant: str = "default"
    namespace: str | None = None
    session: str | None = None
    retention: str | None = None
    last_turn: bool = True
    priority: int | None = None
    block_ids: tuple[int, ...] | None = None

    @property
    def read_namespace(self) -> str:
        return self.namespace or self.tenant


class RequestState(StrEnum):
    """Where a tracked request is in the engine. A `str` (StrEnum): it compares equal to,
    and serialises as, its lowercase name, as the bare strings it replaces did.

        waiting ──admit──> prefill ──prompt done──> running ──last token──> finished
           │                  ^   └──(a one-token request finishes here)──────^
           └──admit──> reloading ──resident──┘
        back to waiting: a retraction (prefill, running), a rolled-back admission, a
        reload a generation bump made stale
    """

    WAITING = "waiting"  # queued: holds no row (not admitted, retracted, or rolled back)
    PREFILL = "prefill"  # admitted, prompt being computed (in the plan or `partial`)
    RUNNING = "running"  # prompt done, decoding
    RELOADING = "reloading"  # its host-tier span is being copied back; cannot run yet
    FINISHED = "finished"  # released by its session's retention policy


@dataclass(frozen=True, kw_only=True)
class FinishedRecord:
    """A finished request as the driver needs it to schedule the next turn."""

    rid: str
    session: str | None
    finish_s: float
    output_ids: np.ndarray
    prompt_tokens: int
    hit_tokens: int
    ttft_s: float
    itl_s: np.ndarray  # float64, one gap per output token after the first
    queue_s: float
    # Why SGLang would refuse this request at its door (door.py), or None.
    # A rejected request holds nothing, outputs nothing and is not counted as finished.
    rejected: str | None = None


@dataclass(kw_only=True)
class Tracked:
    """Engine-internal, mutable: one request's SGLang `Req` plus kvctl's bookkeeping.

    The `Req` and the prompt's `PageChain` are built on first use (`make_req(spec)`), not
    at arrival: the first reader is the admission that examines the request at the head of
    the queue, so a long queue holds specs only (with a `BlockPrompt`, no tokens at all).
    Building a `Req` touches no cache state; SGLang's cache calls are unchanged."""

    spec: RequestSpec
    make_req: Callable[[RequestSpec], Any] = field(repr=False)  # -> schedule_batch.Req
    namespace_label: str
    key: tuple[str, int]  # oracle key: (namespace label, generation at submit)
    state: RequestState = RequestState.WAITING
    admitted_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    itl: array = field(default_factory=lambda: array("d"))  # gaps so far (decode_log.py)
    decode_from: int | None = None  # DecodeLog step its current decode run started at
    hit_tokens: int = 0
    funnel_done: bool = False
    reload_tokens: int = 0  # host-tier rows being (or to be) reloaded
    reload_ready_s: float = 0.0
    reload_start_s: float = 0.0
    reload_required_end: int = 0  # tokens [prefix, end) come from the host tier
    generation: int = 0
    facts: Any = None  # AdmissionFacts gathered at first admission, recorded at execution

    # cached_property: built on first read, then a plain instance attribute (the decode
    # loops read `tr.req` for every running request at every step: no property call).
    @cached_property
    def req(self):
        """The SGLang `Req` (built on first read)."""
        return self.make_req(self.spec)

    @property
    def built(self) -> bool:
        """Whether the `Req` exists yet (a request never examined has none)."""
        return "req" in self.__dict__

    @cached_property
    def chain(self) -> PageChain:
        """The oracle's page hashes of the prompt (built on first read, then kept). Its
        prompt is a zero-copy view of the `Req`'s `origin_input_ids` (read only once the
        request is examined, when its `Req` exists anyway), not a second expansion of a
        `BlockPrompt`: one int64 copy of each live prompt, not two."""
        return PageChain(self.req.origin_input_ids, self.spec.block_ids,
                         getattr(self.spec.tokens, "block_tokens", BLOCK_TOKENS))

    def record_funnel(self, funnel) -> None:
        """Place this request in `funnel` (a FunnelRecorder) once, when its hit is known to
        be used or not: at its prefill, or when its reload completes or is discarded."""
        if not self.funnel_done:
            self.funnel_done = True
            self.hit_tokens = self.facts.s_runtime
            funnel.record(self.facts)
            for observe in funnel.observers:
                observe(self)

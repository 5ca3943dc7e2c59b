"""Cache-aware routing what-if: hash a prompt like SGLang, score workers (seed 003 fig. 7).

Page hashes, exactly as SGLang 0.5.23 publishes them in KV events
(`mem_cache/cpp_utils/hash_binding.cpp`, `mem_cache/utils.py`, `mem_cache/events.py`):

::

    prompt t0 .. t{S-1}, page size P; only full pages are cached
    d_0 = SHA256(seed || page_0 as little-endian uint32)     seed: empty, or when cache_salt is
    d_k = SHA256(d_{k-1} || page_k as little-endian uint32)        set SHA256(b"sglang-cache-
    h_k = first 8 bytes of d_k as a signed big-endian int64        salt-v1\\0" + salt)
    (a page holding a token >= 2**32 hashes b"\\xff" + uint64 words instead)
    dynamo format: h_k' = int64(SHA256(ns_seed || h_k as 8 bytes big-endian)[:8]),
                   ns_seed = SHA256(b"sglang-kv-event-namespace-v1" + parts(extra_key, salt))

This is seed 003 figure 7's rolling Merkle chain h_k = Hash(h_{k-1} || c_k). It is
reimplemented with hashlib (SGLang's own function needs its C++ extension and a 10 s
import); tests check it against `sglang.srt.mem_cache.utils.get_hash_str` and against the
hashes a real UnifiedRadixCache publishes.

Objective (seed 003 figure 7, Stage 2):

    w* = argmax_j [ mu * (Match_j / S) - (1 - mu) * (L_j / L_max)^gamma ]

Match_j: cached prefix tokens on worker j; S: prompt tokens; L_j: worker j's queue depth
(running + waiting requests); L_max: the largest L_j among candidates unless given (the
seed does not define it). The seed gives no values for mu and gamma; kvctl's defaults
(mu = 0.5, gamma = 1) weigh hit ratio and relative load equally and linearly.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

_SALT_TAG = b"sglang-cache-salt-v1\0"
_NAMESPACE_TAG = b"sglang-kv-event-namespace-v1"
_UINT32_MAX = 0xFFFFFFFF


def salt_seed(cache_salt: str) -> bytes:
    """The chain's prior digest for a salted request (utils.compute_node_event_hash_values)."""
    return hashlib.sha256(_SALT_TAG + cache_salt.encode("utf-8")).digest()


def namespace_seed(*, extra_key: str | None, cache_salt: str | None) -> bytes | None:
    """kv_events.kv_event_namespace_seed: None when there is no namespace."""
    if extra_key is None and cache_salt is None:
        return None
    digest = hashlib.sha256(_NAMESPACE_TAG)
    for part in (extra_key, cache_salt):  # presence byte + length prefix keep parts apart
        if part is None:
            digest.update(b"\x00")
            continue
        encoded = part.encode("utf-8")
        digest.update(b"\x01" + len(encoded).to_bytes(8, "little") + encoded)
    return digest.digest()


def namespaced(block_hash: int, seed: bytes | None) -> int:
    """kv_events.namespaced_block_hash."""
    if seed is None:
        return block_hash
    digest = hashlib.sha256(seed + block_hash.to_bytes(8, "big", signed=True)).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def page_hashes(
    tokens: Sequence[int],
    page_size: int,
    *,
    cache_salt: str | None = None,
    extra_key: str | None = None,
    dynamo_format: bool = False,
) -> tuple[int, ...]:
    """Event block hashes of every full page of `tokens` (module docstring).

    `extra_key` enters only the dynamo format (the default format namespaces it only for
    LoRA adapters with a registered name, which a remote attach cannot know).
    """
    if page_size <= 0:
        raise ValueError("page_size must be positive")
    prior = salt_seed(cache_salt) if cache_salt is not None else b""
    seed = namespace_seed(extra_key=extra_key, cache_salt=cache_salt) if dynamo_format else None
    hashes = []
    for start in range(0, len(tokens) - page_size + 1, page_size):
        page = tokens[start : start + page_size]
        if any(t < 0 for t in page):
            raise ValueError("token ids must be non-negative")
        if max(page) > _UINT32_MAX:
            data = b"\xff" + struct.pack(f"<{len(page)}Q", *page)
        else:
            data = struct.pack(f"<{len(page)}I", *page)
        prior = hashlib.sha256(prior + data).digest()
        hashes.append(namespaced(int.from_bytes(prior[:8], "big", signed=True), seed))
    return tuple(hashes)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One worker as the router sees it. `load` None: not observable, excluded."""

    name: str
    matched_tokens: int
    load: int | None
    reason: str = ""  # why the worker cannot take the request (disconnected, no events)


@dataclass(frozen=True, kw_only=True)
class WorkerScore:
    name: str
    matched_tokens: int
    hit_ratio: float
    load: int
    load_term: float
    score: float


@dataclass(frozen=True, kw_only=True)
class RouteDecision:
    prompt_tokens: int
    page_size: int
    mu: float
    gamma: float
    max_load: int
    winner: str | None
    scores: tuple[WorkerScore, ...]  # best first
    excluded: tuple[tuple[str, str], ...]  # (worker, reason)

    @property
    def winner_score(self) -> WorkerScore | None:
        return self.scores[0] if self.winner is not None else None

    @property
    def novel_suffix_tokens(self) -> int | None:
        """Tokens the winner must prefill (seed 003 fig. 7: 40,000 - 32,000 = 8,000)."""
        best = self.winner_score
        return None if best is None else self.prompt_tokens - best.matched_tokens

    @property
    def skipped_pages(self) -> int | None:
        """Page allocations the winner skips (seed 003 fig. 7: 32,000 / 16 = 2,000)."""
        best = self.winner_score
        return None if best is None else best.matched_tokens // self.page_size


def choose_worker(
    prompt_tokens: int,
    page_size: int,
    candidates: Sequence[Candidate],
    *,
    mu: float = 0.5,
    gamma: float = 1.0,
    max_load: int | None = None,
) -> RouteDecision:
    """Score every eligible candidate with the seed 003 figure 7 objective; pure.

    Ties go to the longer match, then the lighter load, then the earlier candidate.
    Raises ValueError for mu outside [0, 1], gamma <= 0 or an empty prompt.
    """
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"mu {mu} is outside [0, 1]")
    if gamma <= 0:
        raise ValueError(f"gamma {gamma} must be positive")
    if prompt_tokens <= 0:
        raise ValueError("the prompt has no tokens")
    eligible = [c for c in candidates if not c.reason and c.load is not None]
    excluded = tuple(
        (c.name, c.reason or "load not observable")
        for c in candidates
        if c.reason or c.load is None
    )
    l_max = max_load if max_load is not None else max((c.load for c in eligible), default=0)
    scores = []
    for order, c in enumerate(eligible):
        hit = c.matched_tokens / prompt_tokens
        load_term = (c.load / l_max) ** gamma if l_max > 0 else 0.0
        score = mu * hit - (1.0 - mu) * load_term  # seed 003 figure 7
        scores.append((score, c.matched_tokens, -c.load, -order, c, hit, load_term))
    scores.sort(key=lambda row: row[:4], reverse=True)
    ranked = tuple(
        WorkerScore(name=c.name, matched_tokens=c.matched_tokens, hit_ratio=hit, load=c.load,
                    load_term=load_term, score=score)
        for score, _, _, _, c, hit, load_term in scores
    )  # fmt: skip
    return RouteDecision(
        prompt_tokens=prompt_tokens, page_size=page_size, mu=mu, gamma=gamma, max_load=l_max,
        winner=ranked[0].name if ranked else None, scores=ranked, excluded=excluded,
    )  # fmt: skip

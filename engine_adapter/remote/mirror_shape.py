"""Shape of a mirrored prefix index: depth, fan-out, shared prefixes, hot prefixes.

Definitions (all over the pages the mirror currently holds, in any medium):

- depth of a page: tokens from the root through the page (exact unless an ancestor was
  never seen, e.g. the mirror attached after the publisher's replay buffer rolled over);
- fan-out of a page: resident child pages; a *branching* page has fan-out >= 2, and its
  depth is the size of a prefix that at least two stored continuations share;
- hot prefix: a page that stored chains branched off from (`attaches`), i.e. a prefix that
  new requests reused and then extended. SGLang emits no event for a request whose prompt
  is entirely cached, so full hits are not visible here; `sglang:cached_tokens_total`
  counts them in aggregate.

Prefixes are shown by a label, never by their block hash (seed 000 0x0CE: no unsalted cache
keys in telemetry): an 8-hex-digit keyed BLAKE2b of the hash with a per-process random key,
stable within one kvctl process, so fleet workers that share a prefix show the same label.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from typing import Mapping

_LABEL_KEY = os.urandom(16)


def prefix_label(block_hash: int) -> str:
    """A per-process label for a block hash (see module docstring)."""
    raw = block_hash.to_bytes(8, "big", signed=True)
    return hashlib.blake2b(raw, key=_LABEL_KEY, digest_size=4).hexdigest()


@dataclass(frozen=True, kw_only=True)
class SharedPrefix:
    label: str
    depth_tokens: int
    fan_out: int


@dataclass(frozen=True, kw_only=True)
class HotPrefix:
    label: str
    depth_tokens: int
    attaches: int
    fan_out: int


@dataclass(frozen=True, kw_only=True)
class MirrorShape:
    blocks: int
    tokens_by_medium: tuple[tuple[str, int], ...]
    blocks_by_medium: tuple[tuple[str, int], ...]
    leaves: int
    roots: int  # pages with no parent (first pages of prompts)
    orphans: int  # pages whose parent the mirror never saw or already dropped
    max_depth_tokens: int
    depth_exact: bool
    branching_blocks: int
    max_fan_out: int
    fan_out_histogram: tuple[tuple[int, int], ...]  # (fan-out, pages) for fan-out >= 1
    max_shared_prefix_tokens: int
    shared_prefixes: tuple[SharedPrefix, ...]  # deepest branching pages first
    hot_prefixes: tuple[HotPrefix, ...]  # most attached-to first
    root_attaches: int
    stored_blocks: int
    removed_blocks: int
    clears: int
    unknown_removals: int

    def tokens(self, medium: str) -> int:
        return dict(self.tokens_by_medium).get(medium, 0)


def summarize(
    blocks: Mapping[int, object],
    children: Mapping[int | None, set[int]],
    *,
    root_attaches: int,
    counts: Mapping[str, int],
    top_k: int,
) -> MirrorShape:
    """Compute a MirrorShape from the mirror's tables (blocks: hash -> MirrorBlock)."""
    tokens_by_medium: Counter[str] = Counter()
    blocks_by_medium: Counter[str] = Counter()
    fan_hist: Counter[int] = Counter()
    leaves = roots = orphans = 0
    max_depth, depth_exact = 0, True
    shared: list[SharedPrefix] = []
    hot: list[HotPrefix] = []
    for block_hash, block in blocks.items():
        for medium in block.media:
            tokens_by_medium[medium] += block.tokens
            blocks_by_medium[medium] += 1
        fan = len(children.get(block_hash, ()))
        if fan == 0:
            leaves += 1
        else:
            fan_hist[fan] += 1
        if block.parent is None:
            roots += 1
        elif block.parent not in blocks:
            orphans += 1
        max_depth = max(max_depth, block.depth_tokens)
        depth_exact = depth_exact and block.depth_exact
        if fan >= 2:
            shared.append(
                SharedPrefix(
                    label=prefix_label(block_hash), depth_tokens=block.depth_tokens, fan_out=fan
                )
            )
        if block.attaches:
            hot.append(
                HotPrefix(
                    label=prefix_label(block_hash), depth_tokens=block.depth_tokens,
                    attaches=block.attaches, fan_out=fan,
                )
            )  # fmt: skip
    shared.sort(key=lambda s: (-s.depth_tokens, -s.fan_out, s.label))
    hot.sort(key=lambda h: (-h.attaches, -h.depth_tokens, h.label))
    return MirrorShape(
        blocks=len(blocks),
        tokens_by_medium=tuple(sorted(tokens_by_medium.items())),
        blocks_by_medium=tuple(sorted(blocks_by_medium.items())),
        leaves=leaves,
        roots=roots,
        orphans=orphans,
        max_depth_tokens=max_depth,
        depth_exact=depth_exact,
        branching_blocks=len(shared),
        max_fan_out=max(fan_hist, default=0),
        fan_out_histogram=tuple(sorted(fan_hist.items())),
        max_shared_prefix_tokens=shared[0].depth_tokens if shared else 0,
        shared_prefixes=tuple(shared[:top_k]),
        hot_prefixes=tuple(hot[:top_k]),
        root_attaches=root_attaches,
        stored_blocks=counts.get("stored_blocks", 0),
        removed_blocks=counts.get("removed_blocks", 0),
        clears=counts.get("cleared", 0),
        unknown_removals=counts.get("unknown_removals", 0),
    )

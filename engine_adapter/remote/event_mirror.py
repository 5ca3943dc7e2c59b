"""The prefix index of a remote SGLang server, rebuilt from its KV events.

A block is one page, identified by SGLang's position-aware page hash (the hash covers the
whole prefix up to and including the page, so a hash fixes its depth). `BlockStored`
carries a chain of pages under one parent; `BlockRemoved` drops pages from one medium;
`AllBlocksCleared` drops everything. A page can live in several media at once (HiCache
backs a GPU page up to CPU_PINNED under the same hash), so a block leaves the mirror when
its last medium is removed.

::

    root ─ h0 ─ h1 ─ h2          BlockStored(hashes=[h0,h1,h2], parent=None)
                  └─ h3 ─ h4     BlockStored(hashes=[h3,h4], parent=h1)   attaches(h1) += 1
    depth_tokens(h4) = tokens(h0) + tokens(h1) + tokens(h3) + tokens(h4)

Single-threaded: `EventStream` serialises access. Keeps no token ids.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from engine_adapter.remote.mirror_shape import MirrorShape, summarize
from engine_adapter.remote.wire import GPU, AllCleared, KvEvent, RemovedBlocks, StoredBlocks
from engine_adapter.base.errors import IntegrityError


@dataclass(slots=True)
class MirrorBlock:
    parent: int | None
    tokens: int
    depth_tokens: int
    depth_exact: bool  # False when an ancestor was never seen (history missing)
    media: set[str] = field(default_factory=set)
    attaches: int = 0  # stored chains that branched off directly below this page


@dataclass(frozen=True, kw_only=True)
class PrefixMatch:
    """How much of a hashed prompt a mirror holds, from the first page on."""

    blocks: int
    tokens: int


class PrefixMirror:
    """Blocks by hash with parent links, token counts and media (see module docstring)."""

    def __init__(self) -> None:
        self._blocks: dict[int, MirrorBlock] = {}
        self._children: dict[int | None, set[int]] = {}
        self.root_attaches = 0  # chains stored straight under the root (no shared prefix)
        self.counts: Counter[str] = Counter()  # stored/removed/cleared/unknown_removals/...

    # ---- mutation -------------------------------------------------------------------------

    def apply(self, event: KvEvent) -> None:
        """Apply one decoded event. Unknown removals are counted, never raised."""
        if isinstance(event, StoredBlocks):
            self._store(event)
        elif isinstance(event, RemovedBlocks):
            self._remove(event)
        elif isinstance(event, AllCleared):
            self.clear()
            self.counts["cleared"] += 1

    def apply_all(self, events: Iterable[KvEvent]) -> None:
        for event in events:
            self.apply(event)

    def clear(self) -> None:
        """Forget every block (AllBlocksCleared, or a publisher restart)."""
        self._blocks.clear()
        self._children.clear()

    def _store(self, event: StoredBlocks) -> None:
        parent = event.parent_block_hash
        attached = False
        for block_hash, tokens in zip(event.block_hashes, event.block_tokens, strict=True):
            self.counts["stored_blocks"] += 1
            block = self._blocks.get(block_hash)
            if block is not None:  # the same page in another medium (e.g. a host backup)
                block.media.add(event.medium)
                parent = block_hash
                continue
            above = self._blocks.get(parent) if parent is not None else None
            if parent is None:
                depth, exact = tokens, True
            elif above is None:
                depth, exact = tokens, False
                self.counts["orphan_stores"] += 1
            else:
                depth, exact = above.depth_tokens + tokens, above.depth_exact
            self._blocks[block_hash] = MirrorBlock(
                parent=parent, tokens=tokens, depth_tokens=depth, depth_exact=exact,
                media={event.medium},
            )  # fmt: skip
            self._children.setdefault(parent, set()).add(block_hash)
            if not attached:  # the first new page of a chain is where it branched off
                attached = True
                if above is not None:
                    above.attaches += 1
                elif parent is None:
                    self.root_attaches += 1
            parent = block_hash

    def _remove(self, event: RemovedBlocks) -> None:
        for block_hash in event.block_hashes:
            block = self._blocks.get(block_hash)
            if block is None or event.medium not in block.media:
                self.counts["unknown_removals"] += 1
                continue
            self.counts["removed_blocks"] += 1
            block.media.discard(event.medium)
            if block.media:
                continue
            del self._blocks[block_hash]
            siblings = self._children.get(block.parent)
            if siblings is not None:
                siblings.discard(block_hash)
                if not siblings:
                    del self._children[block.parent]

    # ---- queries --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def block(self, block_hash: int) -> MirrorBlock | None:
        return self._blocks.get(block_hash)

    def hashes(self, medium: str | None = None) -> frozenset[int]:
        """Block hashes held in `medium` (any medium when None)."""
        return frozenset(h for h, b in self._blocks.items() if medium is None or medium in b.media)

    def tokens(self, medium: str = GPU) -> int:
        return sum(b.tokens for b in self._blocks.values() if medium in b.media)

    def fan_out(self, block_hash: int | None) -> int:
        """Resident child pages of `block_hash` (None: the root)."""
        return len(self._children.get(block_hash, ()))

    def match(self, hashes: Sequence[int], medium: str | None = GPU) -> PrefixMatch:
        """Longest run of `hashes`, from the first, held in `medium` (any when None)."""
        blocks = tokens = 0
        for block_hash in hashes:
            block = self._blocks.get(block_hash)
            if block is None or (medium is not None and medium not in block.media):
                break
            blocks += 1
            tokens += block.tokens
        return PrefixMatch(blocks=blocks, tokens=tokens)

    def shape(self, *, top_k: int = 5) -> MirrorShape:
        """Tree shape, per-medium tokens, shared and hot prefixes (O(blocks))."""
        return summarize(
            self._blocks, self._children, root_attaches=self.root_attaches,
            counts=self.counts, top_k=top_k,
        )  # fmt: skip

    def check_integrity(self) -> None:
        """Parent links and child sets agree; every block has a medium. Raises IntegrityError."""
        linked = sum(len(c) for c in self._children.values())
        if linked != len(self._blocks):
            raise IntegrityError(f"child links {linked} != blocks {len(self._blocks)}")
        for parent, children in self._children.items():
            for child in children:
                block = self._blocks.get(child)
                if block is None or block.parent != parent:
                    raise IntegrityError(f"child {child} listed under {parent} is not linked")
        empty = [h for h, b in self._blocks.items() if not b.media]
        if empty:
            raise IntegrityError(f"{len(empty)} blocks have no medium")

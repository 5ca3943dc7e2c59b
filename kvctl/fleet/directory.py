"""A central prefix directory fed by what replicas store and evict (seed 003, figure 7).

Seed 003 (cluster-scale prefix trie routing, figure 7): a prompt is cut into c-token chunks
(c = 16) and fingerprinted as a rolling chain h_k = Hash(h_{k-1} || c_k); a central
directory knows which worker holds which fingerprint. Here the chain is a polynomial
prefix hash over absolute positions, mod 2^64 with a random odd base B fixed per directory:

    H(n) = sum_{j<n} t_j B^j          h_k = H(k c)   (k = 1, 2, ...: full chunks only)

H(k c) = H((k-1) c) + sum_{i<c} t_{(k-1)c+i} B^{(k-1)c+i}: each fingerprint extends its
predecessor, so equal h_k means an equal prefix of k c tokens (up to 2^-64 collisions).

The directory is fed by SGLang's own KV events from each replica's cache
(`BlockStored` with the page's token ids and its parent's hash, `BlockRemoved`,
`AllBlocksCleared`: sglang/srt/mem_cache/events.py), as a real KV-aware router is. It
keeps, per replica and stored page, the prefix hash and depth at the page's end (so a
child page extends it) and the chunk fingerprints the page completed (so its removal
withdraws them). `match(tokens)` answers, per replica, the tokens covered by the longest
run of leading fingerprints the replica holds.

With c equal to the replicas' page size the match is the replica's own page-granular
prefix hit (the `oracle` policy's view); with c = 16 it is seed 003's directory.
Memory: per replica, one dict entry per resident page and one per resident chunk.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

U64 = np.uint64
CHUNK_TOKENS = 16  # seed 003 figure 7: 16-token chunks


class _Powers:
    """B^j mod 2^64 for j < n, grown on demand."""

    def __init__(self, base: int) -> None:
        self.base = U64(base)
        self.table = np.ones(1, dtype=U64)

    def upto(self, n: int) -> np.ndarray:
        if len(self.table) < n:
            size = max(n, 2 * len(self.table))
            table = np.empty(size, dtype=U64)
            table[0] = 1
            # repeated doubling: table[k:2k] = table[:k] * B^k (uint64 wraps mod 2^64)
            filled, step = 1, self.base
            with np.errstate(over="ignore"):
                while filled < size:
                    take = min(filled, size - filled)
                    table[filled:filled + take] = table[:take] * step
                    step = step * step
                    filled += take
            self.table = table
        return self.table[:n]


class PrefixDirectory:
    """Which replica holds which chunk-aligned prefix, from the replicas' KV events."""

    def __init__(self, replicas: int, chunk_tokens: int = CHUNK_TOKENS, *, seed: int = 0) -> None:
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        self.chunk = chunk_tokens
        rng = np.random.default_rng([seed, 0xF1EE7])
        self._powers = _Powers(int(rng.integers(1, 2**62)) * 2 + 1)
        # per replica: page hash -> (prefix hash at its end, depth at its end, its chunks)
        self._pages: list[dict[int, tuple[int, int, tuple[int, ...]]]] = [
            {} for _ in range(replicas)]
        self._chunks: list[dict[int, int]] = [{} for _ in range(replicas)]  # hash -> refs

    @property
    def replicas(self) -> int:
        return len(self._chunks)

    def chunk_hashes(self, tokens) -> np.ndarray:
        """h_1, h_2, ... of a prompt: the prefix hash at every full chunk."""
        t = np.asarray(tokens, dtype=np.int64)
        full = len(t) // self.chunk * self.chunk
        if full == 0:
            return np.empty(0, dtype=U64)
        with np.errstate(over="ignore"):
            prefix = np.cumsum(t[:full].astype(U64) * self._powers.upto(full), dtype=U64)
        return prefix[self.chunk - 1::self.chunk]

    # ---- feeding ----------------------------------------------------------------------

    def apply(self, replica: int, events: Iterable) -> None:
        """Fold one replica's KV events, in order."""
        for event in events:
            kind = type(event).__name__
            if kind == "BlockStored":
                self._stored(replica, event)
            elif kind == "BlockRemoved":
                for block in event.block_hashes:
                    self._removed(replica, block)
            elif kind == "AllBlocksCleared":
                self._pages[replica].clear()
                self._chunks[replica].clear()

    def _stored(self, replica: int, event) -> None:
        pages = self._pages[replica]
        parent = event.parent_block_hash
        start_hash, depth = (0, 0) if parent is None else pages.get(parent, (None, None, ()))[:2]
        if start_hash is None:  # the parent is unknown (stored before we listened): skip
            return
        tokens = np.asarray(event.token_ids, dtype=np.int64)
        size = event.block_size or len(tokens)
        for index, block in enumerate(event.block_hashes):
            page = tokens[index * size:(index + 1) * size]
            end_hash, end_depth, chunks = self._extend(start_hash, depth, page)
            if block not in pages:
                counts = self._chunks[replica]
                for h in chunks:
                    counts[h] = counts.get(h, 0) + 1
                pages[block] = (end_hash, end_depth, chunks)
            start_hash, depth = end_hash, end_depth

    def _extend(self, start_hash: int, depth: int, page: np.ndarray):
        """The prefix hash and depth after `page`, and the chunk fingerprints it completes."""
        n = len(page)
        with np.errstate(over="ignore"):
            powers = self._powers.upto(depth + n)[depth:]
            running = U64(start_hash) + np.cumsum(page.astype(U64) * powers, dtype=U64)
        ends = np.arange(depth + 1, depth + n + 1)
        chunks = tuple(int(h) for h in running[ends % self.chunk == 0])
        return int(running[-1]), depth + n, chunks

    def _removed(self, replica: int, block: int) -> None:
        entry = self._pages[replica].pop(block, None)
        if entry is None:
            return
        counts = self._chunks[replica]
        for h in entry[2]:
            left = counts.get(h, 0) - 1
            if left > 0:
                counts[h] = left
            else:
                counts.pop(h, None)

    # ---- reading ----------------------------------------------------------------------

    def match(self, hashes: np.ndarray) -> list[int]:
        """Per replica, the tokens of the longest run of leading chunks it holds."""
        out = []
        values = hashes.tolist()
        for counts in self._chunks:
            run = 0
            for h in values:
                if h not in counts:
                    break
                run += 1
            out.append(run * self.chunk)
        return out

    def resident_chunks(self, replica: int) -> int:
        return len(self._chunks[replica])

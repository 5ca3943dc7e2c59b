"""Shared-prefix execution ledger: K/V rows read and partial states kept (seed 000 0x0B).

Storage reuse (one physical copy of a shared prefix) does not by itself stop a decode
kernel from reading that prefix once per request. Hydragen / ChunkAttention schedules read
a shared chunk once for all the queries that cover it and keep one partial online-softmax
state (output row plus max and sum) per covered query:

    C0 (2 rows) covers sequences [0, 4)          logical pairs = sum_c rows_c * coverage_c
    ├── C1 (1 row) covers [0, 2)                 unique rows   = sum_c rows_c
    │   ├── C3 (2 rows) [0, 1)                   partial rows  = sum of coverage_c over
    │   └── C4 (1 row)  [1, 2)                                   chunks with coverage > tau
    └── C2 (2 rows) covers [2, 4)
        ├── C5 (1 row)  [2, 3)
        └── C6 (1 row)  [3, 4)

The row counts are a conceptual payload model: no query reads, output writes, metadata or
kernel launches (seed 000 0x0BE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import non_negative, positive, positive_ints
from kvctl.util.pages import ceil_div


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """One K/V chunk of a prefix tree covering sequence indices [begin, end)."""

    name: str
    rows: int
    begin: int
    end: int

    @property
    def coverage(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True, kw_only=True)
class RowLedger:
    """K/V rows and payload with and without shared execution."""

    logical_rows: int  # every request reads its whole path
    unique_rows: int  # each physical row read once
    saved_rows: int
    baseline_payload_bytes: int
    shared_payload_bytes: int
    saved_payload_bytes: int


@dataclass(frozen=True, kw_only=True)
class TreeLedger:
    """Ledger of an explicit chunk tree (seed 000 0x0BE)."""

    sequences: int
    rows: RowLedger
    materialize_threshold: int  # chunks with coverage > tau keep partial states
    partial_rows: int
    partial_row_bytes: int  # d_v b_O + 2 b_state
    partial_bytes: int


@dataclass(frozen=True, kw_only=True)
class ChunkSizeRow:
    """Traversal and temporary state for one shared-prefix chunk size P_c (seed 000 0x0BI)."""

    chunk_size: int
    ordinary_chunks: int  # sum_r ceil((S + U_r) / P_c)
    shared_chunks: int  # ceil(S / P_c) + sum_r ceil(U_r / P_c)
    partial_rows: int  # B ceil(S / P_c)
    partial_bytes: int


@dataclass(frozen=True, kw_only=True)
class BatchLedger:
    """Ledger of a regular batch: one shared prefix, private suffixes (seed 000 0x0BI)."""

    batch: int
    shared_prefix: int
    suffixes: tuple[int, ...]
    rows: RowLedger
    partial_row_bytes: int
    by_chunk_size: tuple[ChunkSizeRow, ...]


def partial_row_bytes(*, value_dim: int, output_bytes: int, state_bytes: int) -> int:
    """One materialized partial state: output row plus max and sum (d_v b_O + 2 b_state)."""
    positive("value dim", value_dim)
    positive("output bytes", output_bytes)
    positive("state bytes", state_bytes)
    return value_dim * output_bytes + 2 * state_bytes


def _row_ledger(logical: int, unique: int, kv_row_bytes: int) -> RowLedger:
    return RowLedger(
        logical_rows=logical,
        unique_rows=unique,
        saved_rows=logical - unique,
        baseline_payload_bytes=logical * kv_row_bytes,
        shared_payload_bytes=unique * kv_row_bytes,
        saved_payload_bytes=(logical - unique) * kv_row_bytes,
    )


def tree_ledger(
    *,
    chunks: Sequence[Chunk],
    kv_row_bytes: int,
    partial_row: int,
    materialize_threshold: int = 1,
) -> TreeLedger:
    """Ledger of a chunk tree; pure.

    Raises InputError when a chunk is empty, an interval is empty or negative, two
    intervals overlap without nesting (not a tree), or a sequence index is uncovered.
    """
    items = tuple(chunks)
    if not items:
        raise InputError("a prefix tree needs at least one chunk")
    positive("K/V row bytes", kv_row_bytes)
    non_negative("materialize threshold", materialize_threshold)
    for chunk in items:
        positive(f"rows of chunk {chunk.name}", chunk.rows)
        if not 0 <= chunk.begin < chunk.end:
            raise InputError(f"chunk {chunk.name} covers an empty interval [{chunk.begin}, {chunk.end})")
    _check_laminar(items)
    sequences = max(chunk.end for chunk in items)
    covered = {i for chunk in items for i in range(chunk.begin, chunk.end)}
    if len(covered) != sequences:
        missing = min(set(range(sequences)) - covered)
        raise InputError(f"sequence {missing} is covered by no chunk")
    logical = sum(chunk.rows * chunk.coverage for chunk in items)
    unique = sum(chunk.rows for chunk in items)
    partial = sum(c.coverage for c in items if c.coverage > materialize_threshold)
    return TreeLedger(
        sequences=sequences,
        rows=_row_ledger(logical, unique, kv_row_bytes),
        materialize_threshold=materialize_threshold,
        partial_rows=partial,
        partial_row_bytes=partial_row,
        partial_bytes=partial * partial_row,
    )


def _check_laminar(chunks: tuple[Chunk, ...]) -> None:
    for i, a in enumerate(chunks):
        for b in chunks[i + 1 :]:
            disjoint = a.end <= b.begin or b.end <= a.begin
            nested = (a.begin <= b.begin and b.end <= a.end) or (
                b.begin <= a.begin and a.end <= b.end
            )
            if not (disjoint or nested):
                raise InputError(
                    f"chunks {a.name} [{a.begin}, {a.end}) and {b.name} [{b.begin}, {b.end}) "
                    "overlap without nesting; coverage intervals must form a tree"
                )


def batch_ledger(
    *,
    shared_prefix: int,
    suffixes: Sequence[int],
    kv_row_bytes: int,
    partial_row: int,
    chunk_sizes: Sequence[int],
) -> BatchLedger:
    """Ledger of B requests sharing one prefix of S rows; pure.

    Raises InputError for a non-positive prefix, row size or chunk size, or negative
    suffixes.
    """
    positive("shared prefix", shared_prefix)
    positive("K/V row bytes", kv_row_bytes)
    private = tuple(suffixes)
    if not private:
        raise InputError("suffixes must name at least one request")
    for suffix in private:
        non_negative("suffix length", suffix)
    sizes = positive_ints("chunk sizes", chunk_sizes)
    batch = len(private)
    # seed 000 0x0BI: N_logical = B S + sum U_r, N_unique = S + sum U_r, N_saved = (B-1) S
    logical = batch * shared_prefix + sum(private)
    unique = shared_prefix + sum(private)
    rows = tuple(
        ChunkSizeRow(
            chunk_size=size,
            ordinary_chunks=sum(ceil_div(shared_prefix + u, size) for u in private),
            shared_chunks=ceil_div(shared_prefix, size) + sum(ceil_div(u, size) for u in private),
            partial_rows=batch * ceil_div(shared_prefix, size),
            partial_bytes=batch * ceil_div(shared_prefix, size) * partial_row,
        )
        for size in sizes
    )
    return BatchLedger(
        batch=batch,
        shared_prefix=shared_prefix,
        suffixes=private,
        rows=_row_ledger(logical, unique, kv_row_bytes),
        partial_row_bytes=partial_row,
        by_chunk_size=rows,
    )

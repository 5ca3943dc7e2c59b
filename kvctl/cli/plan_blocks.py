"""`kvctl plan block-size` and `kvctl plan cow`: granularity costs (seed 000 0x05A, 0x09, 0x0AB)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.cli.output import to_jsonable
from kvctl.cli.plan_common import Rendered, emit, parse_int_list, parse_size_list, table
from kvctl.cli.plan_model import resolve_geometry
from kvctl.cli.size_text import parse_size
from kvctl.errors import InputError
from kvctl.sizing.plan.block_size import (
    SEED_000_FIXTURE_RECORD_SIZES,
    BlockSizePlan,
    MetadataRecordSizes,
    plan_block_sizes,
)
from kvctl.sizing.plan.cow import CowCost, cow_cost
from kvctl.sizing.plan.kernel_table import KernelTableRow, kernel_tables
from kvctl.util.units import fmt_bytes

_RECORD_KEYS = {
    "map": "map_entry", "desc": "descriptor", "hash": "cached_hash",
    "tail": "tail_record", "free": "free_queue_item", "fixed": "fixed",
}


def _row_bytes(row_bytes: Optional[str], model: Optional[str], kv_dtype: Optional[str], tp: int) -> int:
    if (row_bytes is None) == (model is None):
        raise InputError("give exactly one of --row-bytes or --model")
    if row_bytes is not None:
        return parse_size(row_bytes, "--row-bytes", default_unit="b")
    return resolve_geometry(model).bytes_per_token(kv_dtype, tp=tp)


def _record_sizes(text: Optional[str]) -> MetadataRecordSizes:
    if text is None:
        return SEED_000_FIXTURE_RECORD_SIZES
    values = dict(vars(SEED_000_FIXTURE_RECORD_SIZES))
    for part in text.split(","):
        key, _, number = part.partition("=")
        if key.strip() not in _RECORD_KEYS or not number.strip().isdigit():
            raise InputError(
                f"--record-bytes: expected KEY=BYTES with KEY in {', '.join(_RECORD_KEYS)}, got {part!r}"
            )
        values[_RECORD_KEYS[key.strip()]] = int(number)
    return MetadataRecordSizes(**values)


def block_size_command(
    lengths: Annotated[str, typer.Option(help="Request lengths, a nested exact-prefix family, e.g. 33,25,16.")],
    pool_slots: Annotated[int, typer.Option(help="Provisioned pool size in token slots.")],
    row_bytes: Annotated[Optional[str], typer.Option(help="Bytes per token row per rank, e.g. 64KiB.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Model preset or config.json (row = its cell size).")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype with --model.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor parallelism with --model.")] = 1,
    block_sizes: Annotated[str, typer.Option(help="Allocator block sizes to compare.")] = "4,8,16,32,64",
    branch_offset: Annotated[int, typer.Option(help="Shared tokens before a branch (COW).")] = 20,
    record_bytes: Annotated[Optional[str], typer.Option(help="Metadata record sizes, e.g. map=4,desc=32,hash=24,tail=2,free=4,fixed=128 (default: seed 000 0x0D's synthetic sizes).")] = None,
    kernel_lengths: Annotated[Optional[str], typer.Option(help="Batch lengths for the kernel table ledger, e.g. 64,63,17,1.")] = None,
    kernel_entry_bytes: Annotated[int, typer.Option(help="Bytes per kernel block-table cell.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Compare allocator block sizes as a cost vector (seed 000 0x09): tails, metadata, hits, COW."""
    plan = plan_block_sizes(
        block_sizes=parse_int_list(block_sizes, name="--block-sizes"),
        request_lengths=parse_int_list(lengths, name="--lengths"),
        row_bytes=_row_bytes(row_bytes, model, kv_dtype, tp),
        pool_slots=pool_slots,
        branch_offset=branch_offset,
        record_sizes=_record_sizes(record_bytes),
    )
    kernel = ()
    if kernel_lengths is not None:
        kernel = kernel_tables(
            lengths=parse_int_list(kernel_lengths, name="--kernel-lengths"),
            kernel_block_sizes=[r.block_size for r in plan.rows],
            entry_bytes=kernel_entry_bytes,
        )
    document = {**to_jsonable(plan), "kernel_tables": to_jsonable(kernel)}
    emit(as_json, document, _render_block_sizes(plan, kernel))


def _render_block_sizes(plan: BlockSizePlan, kernel: tuple[KernelTableRow, ...]) -> Rendered:
    cost = table(
        "cost vector per allocator block size",
        ["P", "req-view tail", "unique tail", "refs", "descs", "M_meta", "hits", "hits capped",
         "recompute", "COW r", "COW copy R+W", "COW dst", "A_cap"],
        (
            [r.block_size,
             f"{r.request_view_tail_rows} ({fmt_bytes(r.request_view_tail_bytes)})",
             f"{r.unique_tail_rows} ({fmt_bytes(r.unique_tail_bytes)})",
             r.metadata.request_block_refs, r.metadata.pool_blocks,
             f"{r.metadata.total_bytes:,} B",
             r.prefix_hits.uncapped_tokens, r.prefix_hits.capped_tokens,
             r.prefix_hits.recomputed_tokens, r.cow.valid_tail_rows,
             fmt_bytes(r.cow.copy_read_write_bytes), fmt_bytes(r.cow.new_capacity_bytes),
             "—" if r.cow.capacity_amplification is None else f"{r.cow.capacity_amplification:g}x"]
            for r in plan.rows
        ),
    )
    tables = [cost]
    if kernel:
        tables.append(table(
            "kernel block table (dense, one row per request)",
            ["P_k", "blocks per request", "n_max", "cells", "used", "padding", "table bytes"],
            ([k.kernel_block_size, ",".join(map(str, k.blocks_by_request)), k.max_blocks,
              k.table_cells, k.used_cells, k.padding_cells, f"{k.table_bytes:,} B"] for k in kernel),
        ))
    rows = plan.rows
    tightest = min(rows, key=lambda r: (r.unique_tail_bytes, r.block_size))
    leanest = min(rows, key=lambda r: (r.metadata.total_bytes, -r.block_size))
    most_hits = max(rows, key=lambda r: (r.prefix_hits.capped_tokens, -r.block_size))
    partial = rows[0].prefix_hits.partial_tail_capped_tokens
    no_copy = [str(r.block_size) for r in rows if r.cow.valid_tail_rows == 0]
    why = [
        f"P={tightest.block_size} strands the least unique tail ({fmt_bytes(tightest.unique_tail_bytes)}); "
        f"P={leanest.block_size} keeps the least metadata ({leanest.metadata.total_bytes:,} B)",
        f"P={most_hits.block_size} reuses the most prompt tokens under the logits cap "
        f"({most_hits.prefix_hits.capped_tokens}); immutable partial tails would reuse {partial}",
        "a branch at token "
        f"{plan.branch_offset} copies nothing at P in {{{', '.join(no_copy)}}}" if no_copy else
        f"a branch at token {plan.branch_offset} copies a partial tail at every candidate P",
        "no single block size wins: choose by the component that binds (seed 000 0x09A)",
    ]
    title = (f"block sizes for lengths {list(plan.request_lengths)}, row {fmt_bytes(plan.row_bytes)}, "
             f"pool {plan.pool_slots} slots")
    return Rendered(title, tables, why)


def cow_command(
    offset: Annotated[int, typer.Option(help="Context length at the fork (shared tokens).")],
    block_size: Annotated[int, typer.Option(help="Allocator block size P.")],
    row_bytes: Annotated[Optional[list[str]], typer.Option(help="Row bytes per cache group (repeat per group), e.g. 48KiB.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Model preset or config.json (one group).")] = None,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype with --model.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor parallelism with --model.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Copy-on-write cost of the first divergent append after a fork (seed 000 0x05A)."""
    if bool(row_bytes) == (model is not None):
        raise InputError("give exactly one of --row-bytes (per cache group) or --model")
    rows = (parse_size_list(row_bytes, name="--row-bytes") if row_bytes
            else (resolve_geometry(model).bytes_per_token(kv_dtype, tp=tp),))
    cost = cow_cost(offset=offset, block_size=block_size, row_bytes_by_group=rows)
    emit(as_json, to_jsonable(cost), _render_cow(cost))


def _render_cow(c: CowCost) -> Rendered:
    rows = [
        ["valid shared tail rows r", c.valid_tail_rows],
        ["bundle row (sum over groups)", fmt_bytes(c.bundle_row_bytes)],
        ["copy payload", fmt_bytes(c.copy_payload_bytes)],
        ["copy read + write", fmt_bytes(c.copy_read_write_bytes)],
        ["append write", fmt_bytes(c.append_write_bytes)],
        ["total COW traffic", fmt_bytes(c.traffic_bytes)],
        ["traffic amplification (2r+1)", f"{c.traffic_amplification}x"],
        ["new private capacity", fmt_bytes(c.new_capacity_bytes)],
        ["capacity amplification (P/r)",
         "—" if c.capacity_amplification is None else f"{c.capacity_amplification:g}x"],
    ]
    if c.valid_tail_rows == 0:
        why = [f"the fork at {c.offset} sits on a block boundary: the append takes a fresh block, nothing is copied"]
    else:
        why = [
            f"appending after the fork copies {c.valid_tail_rows} shared rows first: "
            f"{fmt_bytes(c.traffic_bytes)} of traffic, {c.traffic_amplification}x a plain append",
            f"{fmt_bytes(c.new_capacity_bytes)} is capacity reserved, not bytes copied",
        ]
    return Rendered(f"COW at offset {c.offset}, block size {c.block_size}",
                    [table(None, ["quantity", "value"], rows)], why)

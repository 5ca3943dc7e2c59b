"""`kvctl plan vmm` and `kvctl plan shared-prefix` (seed 000 0x06A/0x06F/0x0BJ, 0x0BE/0x0BI)."""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from kvctl.cli.output import to_jsonable
from kvctl.cli.plan_common import Rendered, emit, parse_int_list, parse_size_list, table
from kvctl.cli.plan_model import resolve_geometry
from kvctl.errors import InputError
from kvctl.sizing.plan.shared_prefix import (
    BatchLedger,
    Chunk,
    TreeLedger,
    batch_ledger,
    partial_row_bytes,
    tree_ledger,
)
from kvctl.sizing.plan.vmm import PageGroupRow, VmmLedger, page_group_table, vmm_ledger
from kvctl.util.units import fmt_bytes


def _tensor_row(
    model: Optional[str], tp: int, kv_dtype: Optional[str],
    kv_heads: Optional[int], head_dim: Optional[int], layers: Optional[int],
) -> tuple[int, int]:
    """(B_tensor_row, layers) from --model or from --kv-heads/--head-dim/--kv-dtype/--layers."""
    from kvctl.sizing.dtypes import dtype_bits

    if model is not None:
        if kv_heads is not None or head_dim is not None:
            raise InputError("give --model or --kv-heads/--head-dim, not both")
        geometry = resolve_geometry(model)
        if geometry.attention == "mla":
            raise InputError(f"{geometry.name} caches an MLA latent, not per-layer K and V tensors")
        row_bits = geometry.kv_heads_per_rank(tp) * geometry.head_dim * dtype_bits(kv_dtype or geometry.dtype)
        return row_bits // 8, layers or geometry.num_layers
    if kv_heads is None or head_dim is None or layers is None:
        raise InputError("give --model, or all of --kv-heads, --head-dim and --layers")
    row_bits = kv_heads * head_dim * dtype_bits(kv_dtype or "bf16")  # B_tensor,row = H_kv d_h b
    if row_bits % 8:
        raise InputError("the tensor row is not a whole number of bytes")
    return row_bits // 8, layers


def vmm_command(
    page_group: Annotated[list[str], typer.Option(help="Physical page-group size G (repeat or comma-separate), e.g. 2MiB.")],
    model: Annotated[Optional[str], typer.Option(help="Model preset or config.json.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor parallelism (local K/V heads) with --model.")] = 1,
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV dtype (default: the model's, else bf16).")] = None,
    kv_heads: Annotated[Optional[int], typer.Option(help="Local K/V heads H_kv (without --model).")] = None,
    head_dim: Annotated[Optional[int], typer.Option(help="Elements per K/V head d_h (without --model).")] = None,
    layers: Annotated[Optional[int], typer.Option(help="Local layers L.")] = None,
    slots: Annotated[Optional[int], typer.Option(help="Request slots B reserved in the virtual tensors.")] = None,
    max_context: Annotated[Optional[int], typer.Option(help="T_max rows reserved per request slot.")] = None,
    handles: Annotated[int, typer.Option(help="Physical page handles created up front.")] = 0,
    lengths: Annotated[Optional[str], typer.Option(help="Request lengths to map, e.g. 1024,1025.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """vAttention page-group ledger: reservation, physical pool, page bundles, tails (seed 000 0x06A)."""
    row, layer_count = _tensor_row(model, tp, kv_dtype, kv_heads, head_dim, layers)
    sizes = parse_size_list(page_group, name="--page-group")
    request_lengths = parse_int_list(lengths, name="--lengths") if lengths else ()
    ledgers: tuple[VmmLedger, ...] = ()
    if (slots is None) != (max_context is None):
        raise InputError("give both --slots and --max-context for the reservation ledger")
    if slots is not None:
        ledgers = tuple(
            vmm_ledger(layers=layer_count, request_slots=slots, max_context=max_context,
                       tensor_row_bytes=row, page_group_bytes=size, physical_handles=handles,
                       request_lengths=request_lengths)
            for size in sizes
        )
    groups = page_group_table(tensor_row_bytes=row, page_group_sizes=sizes,
                              request_lengths=request_lengths, layers=layer_count) if request_lengths else ()
    document = {"tensor_row_bytes": row, "layers": layer_count,
                "ledgers": to_jsonable(ledgers), "page_groups": to_jsonable(groups)}
    emit(as_json, document, _render_vmm(row, layer_count, ledgers, groups))


def _render_vmm(row: int, layers: int, ledgers, groups: tuple[PageGroupRow, ...]) -> Rendered:
    tables = []
    if ledgers:
        tables.append(table(
            "reservation ledger (address space is not HBM)",
            ["G", "P_tokens", "R per request/tensor", "M_VA reserved", "M_phys,pool", "page bundle (2LG)"],
            ([fmt_bytes(l.page_group_bytes), l.tokens_per_page, f"{l.reservation_per_request_tensor:,} B",
              f"{l.virtual_reservation_bytes:,} B", f"{l.physical_pool_bytes:,} B",
              f"{l.page_bundle_bytes:,} B"] for l in ledgers),
        ))
    if groups:
        tables.append(table(
            "page groups per request length (one K or V tensor)",
            ["G", "P_G tokens", "T", "N_G", "tail W_G", "backing (all 2L tensors)"],
            ([fmt_bytes(g.page_group_bytes), g.tokens_per_page, f.tokens, f.page_groups,
              f"{f.tail_bytes:,} B", fmt_bytes(f.mapped_bytes_all_tensors)]
             for g in groups for f in g.frontiers),
        ))
    why = [f"one K or V row is {row:,} B per layer, so a page group's token count depends on the tensor manifest"]
    if ledgers:
        why.append("M_VA is reserved address space; only mapped page groups (N_G x 2LG) occupy HBM")
    if groups:
        worst = max(((g, f) for g in groups for f in g.frontiers), key=lambda gf: gf[1].tail_bytes)
        why.append(f"the largest stranded tail is {fmt_bytes(worst[1].tail_bytes)} per tensor "
                   f"(G={fmt_bytes(worst[0].page_group_bytes)}, T={worst[1].tokens}); smaller groups strand less "
                   "but map more often")
    return Rendered(f"vAttention page groups, {layers} layers, row {row:,} B", tables, why)


_CHUNK = re.compile(r"^\s*([\w.-]+)\s*=\s*(\d+)\s*@\s*(\d+)\s*-\s*(\d+)\s*$")


def _chunks(specs: list[str]) -> tuple[Chunk, ...]:
    chunks = []
    for spec in specs:
        match = _CHUNK.match(spec)
        if not match:
            raise InputError(f"--chunk: expected NAME=ROWS@BEGIN-END (e.g. C0=2@0-4), got {spec!r}")
        name, rows, begin, end = match.groups()
        chunks.append(Chunk(name=name, rows=int(rows), begin=int(begin), end=int(end)))
    return tuple(chunks)


def shared_prefix_command(
    kv_row_bytes: Annotated[int, typer.Option(help="Bytes of one K/V row read by attention.")],
    value_dim: Annotated[int, typer.Option(help="d_v: width of a partial output row.")],
    prefix: Annotated[Optional[int], typer.Option(help="Shared prefix rows S (regular batch).")] = None,
    suffixes: Annotated[Optional[str], typer.Option(help="Private suffix rows per request, e.g. 8,8,16,16.")] = None,
    chunk_sizes: Annotated[str, typer.Option(help="Shared-prefix chunk sizes P_c to compare.")] = "16,32,64",
    chunk: Annotated[Optional[list[str]], typer.Option(help="A tree chunk NAME=ROWS@BEGIN-END (repeat); replaces --prefix.")] = None,
    threshold: Annotated[int, typer.Option(help="Chunks covering more than this many sequences keep partial states.")] = 1,
    output_bytes: Annotated[int, typer.Option(help="b_O: bytes per partial output element.")] = 2,
    state_bytes: Annotated[int, typer.Option(help="b_state: bytes of the max and of the sum.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Shared-prefix execution ledger: rows read once, saved reads, partial-state bytes (seed 000 0x0BI)."""
    partial = partial_row_bytes(value_dim=value_dim, output_bytes=output_bytes, state_bytes=state_bytes)
    if chunk:
        if prefix is not None or suffixes is not None:
            raise InputError("give --chunk (a tree) or --prefix/--suffixes (a batch), not both")
        ledger = tree_ledger(chunks=_chunks(chunk), kv_row_bytes=kv_row_bytes, partial_row=partial,
                             materialize_threshold=threshold)
        emit(as_json, to_jsonable(ledger), _render_tree(ledger))
        return
    if prefix is None or suffixes is None:
        raise InputError("give --prefix and --suffixes, or a tree with --chunk")
    ledger = batch_ledger(shared_prefix=prefix, suffixes=parse_int_list(suffixes, name="--suffixes", low=0),
                          kv_row_bytes=kv_row_bytes, partial_row=partial,
                          chunk_sizes=parse_int_list(chunk_sizes, name="--chunk-sizes"))
    emit(as_json, to_jsonable(ledger), _render_batch(ledger))


def _rows_table(rows) -> object:
    return table("K/V rows read", ["ledger", "rows", "payload"], [
        ["per-sequence (logical)", rows.logical_rows, fmt_bytes(rows.baseline_payload_bytes)],
        ["shared once (unique)", rows.unique_rows, fmt_bytes(rows.shared_payload_bytes)],
        ["saved", rows.saved_rows, fmt_bytes(rows.saved_payload_bytes)],
    ])


def _render_batch(ledger: BatchLedger) -> Rendered:
    chunks = table("traversal and partial states per chunk size",
                   ["P_c", "ordinary chunks", "shared chunks", "partial rows", "partial bytes"],
                   ([r.chunk_size, r.ordinary_chunks, r.shared_chunks, r.partial_rows,
                     f"{r.partial_bytes:,} B"] for r in ledger.by_chunk_size))
    least = min(ledger.by_chunk_size, key=lambda r: (r.partial_bytes, r.chunk_size))
    why = [
        f"sharing saves {ledger.rows.saved_rows} row reads ((B-1) S) at every chunk size",
        f"P_c={least.chunk_size} keeps the fewest partial states ({least.partial_bytes:,} B) if prefix "
        "boundaries are regular; irregular ones favour smaller chunks",
    ]
    return Rendered(f"shared prefix {ledger.shared_prefix} rows, batch {ledger.batch}",
                    [_rows_table(ledger.rows), chunks], why)


def _render_tree(ledger: TreeLedger) -> Rendered:
    state = table("partial states", ["quantity", "value"], [
        ["chunks materialized (coverage > threshold)", f"> {ledger.materialize_threshold}"],
        ["partial rows", ledger.partial_rows],
        ["bytes per partial row (d_v b_O + 2 b_state)", f"{ledger.partial_row_bytes} B"],
        ["partial buffer", f"{ledger.partial_bytes:,} B"],
    ])
    why = [f"{ledger.sequences} sequences read {ledger.rows.unique_rows} unique rows instead of "
           f"{ledger.rows.logical_rows}; the price is a {ledger.partial_bytes:,} B partial-state buffer"]
    return Rendered(f"prefix tree of {ledger.sequences} sequences", [_rows_table(ledger.rows), state], why)

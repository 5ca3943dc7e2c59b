"""Translate (request, token, layer, K/V, head, lane) to block, slot id and byte address.

Reads a layout manifest (YAML, see examples/layouts/) and runs seed 000 0x03I's checked
translator; a failing check exits 2 naming the stage (request visibility, table bounds,
physical identity, physical validity, coordinate range).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvctl.cli.output import to_jsonable
from kvctl.cli.plan_common import Rendered, emit, table
from kvctl.errors import InputError
from kvctl.sizing.address import AddressRejected, RejectStage, Translation, translate
from kvctl.sizing.layout import load_layout


def addr_command(
    layout: Annotated[Path, typer.Argument(help="Layout manifest (YAML).")],
    request: Annotated[str, typer.Option(help="Request id in the manifest.")],
    token: Annotated[int, typer.Option(help="Logical token position.")],
    layer: Annotated[int, typer.Option(help="Model layer.")],
    kind: Annotated[str, typer.Option(help="K or V.")] = "K",
    head: Annotated[int, typer.Option(help="Local K/V head.")] = 0,
    lane: Annotated[int, typer.Option(help="Head-dimension lane.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Translate a K/V coordinate through a layout manifest to block, slot id and byte address."""
    if kind.upper() not in ("K", "V"):
        raise InputError(f"--kind must be K or V, got {kind!r}")
    try:
        result = translate(load_layout(layout), request=request, token=token, layer=layer,
                           kind=kind.upper(), head=head, lane=lane)
    except AddressRejected as err:
        if err.stage is RejectStage.UNKNOWN_REQUEST:  # the option at fault, named
            raise InputError(f"--request: {err}") from None
        raise
    emit(as_json, to_jsonable(result), _render(result))


def _render(t: Translation) -> Rendered:
    rows = [
        ["cache group", f"{t.group} (layer_local {t.layer_local})"],
        ["logical block / token offset", f"{t.logical_block} / {t.token_offset}"],
        ["table version -> physical block", f"v{t.table_version} -> {t.physical_block}"],
        ["descriptor", f"generation {t.pool_generation}, slot {t.physical_slot}, {t.valid_rows} valid rows"],
        ["slot id", f"{t.slot_id:,}"],
        ["axis order", ", ".join(t.axis_order)],
        ["shape", str(list(t.shape))],
        ["strides (elements)", str(list(t.strides))],
        ["coordinate", str(list(t.coordinate))],
        ["element offset", f"{t.element_offset:,}"],
        ["byte offset", f"{t.byte_offset:,}"],
        [f"{t.kind} base", f"{t.base_address:,}"],
        ["byte address", f"{t.byte_address:,}"],
    ]
    why = [f"slot id {t.slot_id:,} names a token row in {t.group}'s pool; byte address "
           f"{t.byte_address:,} also needs the layer, head, lane, axis order and {t.kind} base"]
    title = (f"request {t.request} token {t.token} layer {t.layer} {t.kind} head {t.head} lane {t.lane}")
    return Rendered(title, [table(None, ["step", "value"], rows)], why)

"""Load and validate a layout manifest (YAML) for `kvctl addr` (seed 000 0x03B-0x03I).

Parsing is the only I/O here; `layout_from_dict` and `validate_layout` are pure. A manifest
that would let the translator produce a wrong address is rejected when it loads:

- cache groups must tile the layers [0, L) without gaps or overlaps;
- each group's axis order names each of the five axes exactly once, and its shape agrees
  with its layer range, block size, local heads and head width;
- descriptors must sit in distinct slots inside the pool (no slot reuse in a generation)
  and commit at most `block_size` rows;
- K/V tensor byte ranges must not overlap across groups;
- every request has a table per group, of exactly ceil(context / block_size) entries
  (no table-length drift).
Example: examples/layouts/seed000_0x03F.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvctl.errors import InputError
from kvctl.sizing.address import (
    AXES,
    CacheGroup,
    Descriptor,
    Layout,
    RequestSnapshot,
    frozen_mapping,
)
from kvctl.util.pages import ceil_div


def load_layout(path: str | Path) -> Layout:
    """Read, parse and validate a manifest file. Raises InputError with one line."""
    from kvctl.util.inputs import load_yaml  # input parsing only; the translator stays pure

    data = load_yaml(path, what="layout")
    return layout_from_dict(data, source=str(path))


def layout_from_dict(data: Any, *, source: str = "layout") -> Layout:
    """Build a validated Layout from parsed YAML; raises InputError naming the field."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: top level must be a mapping")
    try:
        groups = tuple(_group(g) for g in _list(data, "groups"))
        requests = {
            str(rid): _request(str(rid), spec) for rid, spec in _mapping(data, "requests").items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InputError(f"{source}: {_describe(err)}") from None
    layout = Layout(
        name=str(data.get("name", source)), groups=groups, requests=frozen_mapping(requests)
    )
    validate_layout(layout, source=source)
    return layout


def validate_layout(layout: Layout, *, source: str = "layout") -> None:
    """Raise InputError for the first structural defect; returns None when sound."""

    def fail(message: str) -> None:
        raise InputError(f"{source}: {message}")

    if not layout.groups:
        fail("no cache groups")
    ordered = sorted(layout.groups, key=lambda g: g.layer_start)
    expected_start = 0
    for group in ordered:
        if group.layer_start != expected_start:
            fail(f"group {group.id} starts at layer {group.layer_start}, expected {expected_start} "
                 "(layer gap or overlap)")
        if group.layer_end <= group.layer_start:
            fail(f"group {group.id} has an empty layer range")
        expected_start = group.layer_end
        _check_group(group, fail)
    _check_tensor_ranges(layout.groups, fail)
    ids = {g.id for g in layout.groups}
    if len(ids) != len(layout.groups):
        fail("duplicate cache group ids")
    for request in layout.requests.values():
        if request.context_length < 0:
            fail(f"request {request.id} has a negative context length")
        for group in layout.groups:
            table = request.block_tables.get(group.id)
            if table is None:
                fail(f"request {request.id} has no table for group {group.id}")
            needed = ceil_div(request.context_length, group.block_size)
            if len(table) != needed:
                fail(f"request {request.id} table for {group.id} has {len(table)} entries, "
                     f"its context of {request.context_length} needs {needed} (table-length drift)")
        extra = set(request.block_tables) - ids
        if extra:
            fail(f"request {request.id} has a table for unknown group {sorted(extra)[0]}")


def _check_group(group: CacheGroup, fail) -> None:
    if sorted(group.axis_order) != sorted(AXES) or len(set(group.axis_order)) != len(AXES):
        fail(f"group {group.id} axis_order must name each of {', '.join(AXES)} once")
    if len(group.shape) != len(group.axis_order) or min(group.shape) <= 0:
        fail(f"group {group.id} shape must give one positive dimension per axis")
    dims = dict(zip(group.axis_order, group.shape))
    declared = {
        "layer_local": group.layer_end - group.layer_start,
        "token_offset": group.block_size,
        "kv_head_local": group.kv_heads_local,
        "head_dim": group.head_dim,
    }
    for axis, want in declared.items():
        if dims[axis] != want:
            fail(f"group {group.id} shape gives {axis}={dims[axis]}, the group declares {want}")
    if set(group.base) != {"K", "V"}:
        fail(f"group {group.id} base must give K and V addresses")
    if group.scalar_bytes <= 0:
        fail(f"group {group.id} scalar_bytes must be > 0")
    slots: dict[int, int] = {}
    for block_id, desc in group.descriptors.items():
        if not 0 <= desc.physical_slot < dims["physical_slot"]:
            fail(f"block {block_id} slot {desc.physical_slot} is outside the "
                 f"{dims['physical_slot']}-slot pool of {group.id}")
        if not 0 <= desc.valid_rows <= group.block_size:
            fail(f"block {block_id} valid_rows {desc.valid_rows} exceeds block size {group.block_size}")
        if desc.pool_generation == group.pool_generation:
            owner = slots.setdefault(desc.physical_slot, block_id)
            if owner != block_id:
                fail(f"blocks {owner} and {block_id} both hold slot {desc.physical_slot} of {group.id}")


def _check_tensor_ranges(groups: tuple[CacheGroup, ...], fail) -> None:
    ranges = sorted(
        (g.base[kind], g.end(kind), f"{g.id}.{kind}") for g in groups for kind in ("K", "V")
        if kind in g.base
    )
    for (_, end_a, name_a), (start_b, _, name_b) in zip(ranges, ranges[1:]):
        if start_b < end_a:
            fail(f"tensor ranges {name_a} and {name_b} overlap")


def _group(spec: Mapping) -> CacheGroup:
    layers = _list(spec, "layers")
    if len(layers) != 2:
        raise ValueError(f"group {spec.get('id')}: layers must be [start, end)")
    descriptors = {
        int(block): Descriptor(
            pool_generation=int(d["pool_generation"]),
            physical_slot=int(d["physical_slot"]),
            valid_rows=int(d["valid_rows"]),
        )
        for block, d in _mapping(spec, "descriptors").items()
    }
    return CacheGroup(
        id=str(spec["id"]),
        layer_start=int(layers[0]),
        layer_end=int(layers[1]),
        block_size=int(spec["block_size"]),
        pool_id=str(spec.get("pool_id", spec["id"])),
        pool_generation=int(spec["pool_generation"]),
        kv_heads_local=int(spec["kv_heads_local"]),
        head_dim=int(spec["head_dim"]),
        scalar_bytes=int(spec["scalar_bytes"]),
        axis_order=tuple(str(a) for a in _list(spec, "axis_order")),
        shape=tuple(int(d) for d in _list(spec, "shape")),
        base=frozen_mapping({str(k): int(v) for k, v in _mapping(spec, "base").items()}),
        descriptors=frozen_mapping(descriptors),
    )


def _request(rid: str, spec: Mapping) -> RequestSnapshot:
    tables = {str(g): tuple(int(b) for b in t) for g, t in _mapping(spec, "block_tables").items()}
    return RequestSnapshot(
        id=rid,
        context_length=int(spec["context_length"]),
        table_version=int(spec.get("table_version", 0)),
        block_tables=frozen_mapping(tables),
    )


def _list(spec: Mapping, key: str) -> list:
    value = spec[key]
    if not isinstance(value, list):
        raise TypeError(f"{key} must be a list")
    return value


def _mapping(spec: Mapping, key: str) -> Mapping:
    value = spec[key]
    if not isinstance(value, Mapping):
        raise TypeError(f"{key} must be a mapping")
    return value


def _describe(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"missing field {err.args[0]!r}"
    return str(err)

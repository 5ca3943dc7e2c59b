"""Translate a logical K/V coordinate to a slot id and a byte address (seed 000 0x03C-0x03I).

    (request, token, layer, K|V, head, lane)
      -> cache group g containing layer           layer_local  = layer - g.layer_start
      -> logical block, token offset              j = token // P_g,  o = token % P_g
      -> request table [g][j] -> physical block   (table version of the snapshot)
      -> descriptor(pool generation, physical slot, valid rows)
      -> slot_id      = physical_slot * P_g + o   (which token row; NOT an address)
      -> coordinate in the group's axis order, row-major strides
      -> byte address = base[K|V] + scalar_bytes * sum(coordinate[a] * stride[a])

Checks run in the seed's rejection order, and the first failing one names itself:
request visibility -> table bounds -> physical identity -> physical validity -> coordinates
(seed 000 0x03G: a shorter request sharing a fully written block must not read rows past
its own context, so visibility is checked before the physical valid-row count.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from math import prod
from types import MappingProxyType

from kvctl.errors import InputError

AXES = ("physical_slot", "layer_local", "kv_head_local", "token_offset", "head_dim")


class RejectStage(str, Enum):
    """The translator's checks, in the order they run."""

    UNKNOWN_REQUEST = "unknown request"
    REQUEST_VISIBILITY = "request visibility"
    LAYER = "layer outside every cache group"
    KIND = "tensor kind"
    TABLE_BOUNDS = "table bounds"
    PHYSICAL_IDENTITY = "physical identity"
    PHYSICAL_VALIDITY = "physical validity"
    COORDINATE = "coordinate range"
    TENSOR_RANGE = "tensor range"


class AddressRejected(InputError):
    """A translation failed one check; `stage` names which (exit 2)."""

    def __init__(self, stage: RejectStage, detail: str) -> None:
        super().__init__(f"rejected at {stage.value}: {detail}")
        self.stage = stage


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    """What a physical block id resolves to in its pool generation."""

    pool_generation: int
    physical_slot: int
    valid_rows: int


@dataclass(frozen=True, kw_only=True)
class CacheGroup:
    """One cache group's tensors: layers [layer_start, layer_end), axis order and bases.

    `shape` lists the dimension of each axis in `axis_order`; K and V share the shape and
    differ only in base address.
    """

    id: str
    layer_start: int
    layer_end: int
    block_size: int
    pool_id: str
    pool_generation: int
    kv_heads_local: int
    head_dim: int
    scalar_bytes: int
    axis_order: tuple[str, ...]
    shape: tuple[int, ...]
    base: Mapping[str, int]  # "K" / "V" -> byte address
    descriptors: Mapping[int, Descriptor]

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major element strides: product of the dimensions to the right (0x03E)."""
        return tuple(prod(self.shape[a + 1 :]) for a in range(len(self.shape)))

    @property
    def tensor_bytes(self) -> int:
        return self.scalar_bytes * prod(self.shape)

    def end(self, kind: str) -> int:
        """One past the last byte of the K or V tensor."""
        return self.base[kind] + self.tensor_bytes


@dataclass(frozen=True, kw_only=True)
class RequestSnapshot:
    """A request's visible context and its per-group block tables at one table version."""

    id: str
    context_length: int
    table_version: int
    block_tables: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A layout manifest: cache groups and the request snapshots that map into them."""

    name: str
    groups: tuple[CacheGroup, ...]
    requests: Mapping[str, RequestSnapshot]


@dataclass(frozen=True, kw_only=True)
class Translation:
    """Every intermediate of one checked translation (seed 000 0x03F's ten steps)."""

    request: str
    token: int
    layer: int
    kind: str
    head: int
    lane: int
    group: str
    layer_local: int
    logical_block: int
    token_offset: int
    table_version: int
    physical_block: int
    pool_generation: int
    physical_slot: int
    valid_rows: int
    slot_id: int
    axis_order: tuple[str, ...]
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    coordinate: tuple[int, ...]
    element_offset: int
    byte_offset: int
    base_address: int
    byte_address: int


def frozen_mapping(items: Mapping) -> Mapping:
    """A read-only view, so a loaded layout cannot drift after validation."""
    return MappingProxyType(dict(items))


def translate(
    layout: Layout, *, request: str, token: int, layer: int, kind: str, head: int, lane: int
) -> Translation:
    """Resolve one scalar; pure. Raises AddressRejected at the first failing check."""
    snapshot = layout.requests.get(request)
    if snapshot is None:
        raise AddressRejected(RejectStage.UNKNOWN_REQUEST, f"no request {request!r} in the layout")
    if not 0 <= token < snapshot.context_length:
        raise AddressRejected(
            RejectStage.REQUEST_VISIBILITY,
            f"token {token} is outside request {request}'s context [0, {snapshot.context_length})",
        )
    group = next((g for g in layout.groups if g.layer_start <= layer < g.layer_end), None)
    if group is None:
        raise AddressRejected(RejectStage.LAYER, f"layer {layer} is in no cache group")
    if kind not in group.base:
        raise AddressRejected(RejectStage.KIND, f"kind must be K or V, got {kind!r}")
    layer_local = layer - group.layer_start
    logical_block, token_offset = divmod(token, group.block_size)  # seed 000 0x03C
    table = snapshot.block_tables[group.id]
    if logical_block >= len(table):
        raise AddressRejected(
            RejectStage.TABLE_BOUNDS,
            f"logical block {logical_block} is past {request}'s {len(table)}-entry table in {group.id}",
        )
    physical_block = table[logical_block]
    desc = group.descriptors.get(physical_block)
    if desc is None or desc.pool_generation != group.pool_generation:
        seen = "unknown" if desc is None else f"generation {desc.pool_generation}"
        raise AddressRejected(
            RejectStage.PHYSICAL_IDENTITY,
            f"physical block {physical_block} is {seen}, pool {group.pool_id} is at "
            f"generation {group.pool_generation}",
        )
    if token_offset >= desc.valid_rows:
        raise AddressRejected(
            RejectStage.PHYSICAL_VALIDITY,
            f"offset {token_offset} of block {physical_block} is not committed "
            f"({desc.valid_rows} valid rows)",
        )
    if not 0 <= head < group.kv_heads_local or not 0 <= lane < group.head_dim:
        raise AddressRejected(
            RejectStage.COORDINATE,
            f"head {head} / lane {lane} outside {group.kv_heads_local} heads x {group.head_dim} lanes",
        )
    slot_id = desc.physical_slot * group.block_size + token_offset  # seed 000 0x03D
    by_axis = {
        "physical_slot": desc.physical_slot,
        "layer_local": layer_local,
        "kv_head_local": head,
        "token_offset": token_offset,
        "head_dim": lane,
    }
    coordinate = tuple(by_axis[axis] for axis in group.axis_order)
    strides = group.strides
    element_offset = sum(c * s for c, s in zip(coordinate, strides))  # seed 000 0x03E
    byte_offset = group.scalar_bytes * element_offset
    base = group.base[kind]
    if not base <= base + byte_offset < group.end(kind):  # a validated layout never trips this
        raise AddressRejected(
            RejectStage.TENSOR_RANGE,
            f"byte offset {byte_offset} is outside the {group.tensor_bytes} B {kind} tensor of {group.id}",
        )
    return Translation(
        request=request, token=token, layer=layer, kind=kind, head=head, lane=lane,
        group=group.id, layer_local=layer_local, logical_block=logical_block,
        token_offset=token_offset, table_version=snapshot.table_version,
        physical_block=physical_block, pool_generation=desc.pool_generation,
        physical_slot=desc.physical_slot, valid_rows=desc.valid_rows, slot_id=slot_id,
        axis_order=group.axis_order, shape=group.shape, strides=strides,
        coordinate=coordinate, element_offset=element_offset, byte_offset=byte_offset,
        base_address=base, byte_address=base + byte_offset,
    )

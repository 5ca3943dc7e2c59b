"""A `Snapshot` as plain JSON, and back: the wire format of the SGLang plugin's `/snapshot`.

The plugin runs inside a real SGLang scheduler and serves what kvctl's sampler read there;
kvctl's remote side (`inspect`, `monitor`, `exporter`) decodes it into the same `Snapshot`
the embedded engine produces, so every renderer and metric works unchanged::

    GET /snapshot  ->  {"schema_version": 1, "kvctl_version": "0.1.0",
                        "snapshot": encode_snapshot(snap)}

Encoding, field by field, driven by the dataclasses' own type hints (one rule per type,
no per-field code to drift from `snapshot.py`):

    dataclass       -> {"field": value, ...}     every field, in declaration order
    tuple           -> [ ... ]                    also tuples of tuples (tokens_by_medium)
    TreeNodes       -> {"node_id": [...], "parent_id": [...], ...}   by column, as stored
    None            -> null                       "not observable" survives the trip
    float           -> number, or "NaN" / "Infinity" / "-Infinity" (JSON has no such numbers)
    int, str, bool  -> themselves

`decode_snapshot(encode_snapshot(s)) == s` for every `Snapshot` (NaN aside, which equals
nothing), and the same for `encode_receipt` / `decode_receipt` (the items of `/receipts`). Decoding checks every value against the field's type and raises `InputError`
naming the field path; keys it does not know are ignored and missing fields that have a
default take it, so a newer writer of the same schema version stays readable. A change
that is not additive bumps `SCHEMA_VERSION`; `check_schema` refuses a document of another
version with a message naming both.

Pure: no I/O; `json.dumps(encode_snapshot(s), allow_nan=False)` always succeeds.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from typing import Any

from engine_adapter.receipts import Receipt
from engine_adapter.snapshot import Snapshot
from engine_adapter.tree_nodes import COLUMNS, TreeNodes, TreeNodeView
from engine_adapter.base.errors import InputError

SCHEMA_VERSION: int = 1

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class SchemaMismatch(InputError):
    """A document written under another `SCHEMA_VERSION` (another kvctl version's plugin)."""


def check_schema(doc: Any) -> None:
    """Raise `SchemaMismatch` unless `doc["schema_version"] == SCHEMA_VERSION`.

    A document that is not a JSON object, or carries no integer `schema_version`, raises
    `InputError` (it is not a kvctl plugin document at all)."""
    if not isinstance(doc, dict):
        raise InputError(f"plugin document is a JSON {type(doc).__name__}, not an object")
    version = doc.get("schema_version")
    if type(version) is not int:
        raise InputError(f"plugin document has no integer schema_version (got {version!r})")
    if version != SCHEMA_VERSION:
        raise SchemaMismatch(
            f"plugin schema_version {version} is not the version this kvctl reads "
            f"({SCHEMA_VERSION}): run the same kvctl version in the server and the client")


def encode_snapshot(snap: Snapshot) -> dict:
    """`snap` as a dict of plain JSON types (see the module docstring)."""
    return _encode(snap)


def decode_snapshot(doc: dict) -> Snapshot:
    """The `Snapshot` that `encode_snapshot` turned into `doc`; `InputError` if malformed."""
    return _decode(Snapshot, doc, "snapshot")


def encode_receipt(receipt: Receipt) -> dict:
    """One `Receipt` (engine_adapter/receipts.py) as plain JSON types, like a snapshot."""
    return _encode(receipt)


def decode_receipt(doc: dict) -> Receipt:
    """The inverse of `encode_receipt`; `InputError` if malformed."""
    return _decode(Receipt, doc, "receipt")


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, TreeNodes):
        return {name: _encode(getattr(value, name)) for name in COLUMNS}
    if dataclasses.is_dataclass(value):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_encode(item) for item in value]
    raise TypeError(f"cannot encode {type(value).__name__} in a snapshot")


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, value, path)
            except InputError as exc:
                errors.append(str(exc))
        raise InputError(errors[0] if errors else f"{path}: null is not allowed")
    if origin is tuple:
        return _decode_tuple(typing.get_args(tp), value, path)
    if tp is TreeNodes:
        return _decode_tree_nodes(value, path)
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, value, path)
    if tp is float:
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if type(value) is int:
            return value
    elif tp is bool or tp is str:
        if type(value) is tp:
            return value
    else:
        raise TypeError(f"{path}: no decoder for {tp!r}")
    raise InputError(f"{path}: expected {tp.__name__}, got {_json_type(value)}")


def _decode_tuple(args: tuple, value: Any, path: str) -> tuple:
    if not isinstance(value, list):
        raise InputError(f"{path}: expected an array, got {_json_type(value)}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(args[0], item, f"{path}[{i}]") for i, item in enumerate(value))
    if len(value) != len(args):
        raise InputError(f"{path}: expected {len(args)} items, got {len(value)}")
    return tuple(_decode(t, item, f"{path}[{i}]") for i, (t, item) in enumerate(zip(args, value)))


def _decode_dataclass(cls: type, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected an object, got {_json_type(value)}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            kwargs[f.name] = _decode(hints[f.name], value[f.name], f"{path}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError(f"{path}: field {f.name!r} is missing")
    return cls(**kwargs)


def _decode_tree_nodes(value: Any, path: str) -> TreeNodes:
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected an object of columns, got {_json_type(value)}")
    hints = _hints(TreeNodeView)
    columns = {}
    for name in COLUMNS:
        if name in value:
            columns[name] = _decode(tuple[hints[name], ...], value[name], f"{path}.{name}")
    try:
        return TreeNodes(**columns)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)

"""Turn `--model` / `--gpu` options into the plain numbers the planners take.

Every plan command also accepts the numbers directly (`--bytes-per-token`, `--row-bytes`,
`--params-b`, ...) so that a plan never depends on a preset existing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvctl.errors import InputError


@dataclass(frozen=True)
class TokenBytes:
    """m_token for the whole model and for one device of a TP x PP replica."""

    model: int
    per_device: int
    geometry: Any | None  # kvctl.sizing.geometry.ModelGeometry when --model was given


def resolve_geometry(model: str):
    """The ModelGeometry for a preset name or config path (InputError when unknown)."""
    from kvctl.sizing.models import resolve_model

    return resolve_model(model)


def token_bytes(
    *,
    model: str | None,
    bytes_per_token: int | None,
    kv_dtype: str | None,
    tp: int,
    pp: int,
) -> TokenBytes:
    """m_token from `--model` (SGLang's cell size per rank) or an explicit `--bytes-per-token`.

    An explicit number is the whole-model m_token; each device of a replica then stores
    m_token / (TP x PP) of it, which must be whole. Raises InputError when neither or both
    are given.
    """
    if (model is None) == (bytes_per_token is None):
        raise InputError("give exactly one of --model or --bytes-per-token")
    if model is not None:
        geometry = resolve_geometry(model)
        return TokenBytes(
            model=geometry.model_bytes_per_token(kv_dtype),
            per_device=geometry.bytes_per_token(kv_dtype, tp=tp, pp=pp),
            geometry=geometry,
        )
    if bytes_per_token <= 0:
        raise InputError(f"--bytes-per-token must be > 0, got {bytes_per_token}")
    if bytes_per_token % (tp * pp):
        raise InputError(
            f"--bytes-per-token {bytes_per_token} does not split evenly over TP x PP = {tp * pp}"
        )
    return TokenBytes(model=bytes_per_token, per_device=bytes_per_token // (tp * pp), geometry=None)


def check_context(geometry: Any | None, context: int) -> None:
    """Refuse a context longer than the model's window (plans must be servable)."""
    if geometry is not None and context > geometry.max_context:
        alternative = ("pass --bytes-per-token instead of --model" if _command_has("bytes_per_token")
                       else "size a RoPE-scaled deployment with `kvctl plan capacity "
                       "--bytes-per-token`")
        raise InputError(
            f"context {context:,} exceeds {geometry.name}'s window of "
            f"{geometry.max_context:,} tokens; pick a long-context model or {alternative}"
        )


def _command_has(parameter: str) -> bool:
    """Whether the running command takes `parameter` (so a hint never names a missing option)."""
    from typer._click.globals import get_current_context  # Typer 0.29 vendors Click

    ctx = get_current_context(silent=True)
    return ctx is not None and any(p.name == parameter for p in ctx.command.params)


def params_count(geometry: Any | None, params_b: float | None) -> float:
    """Parameters: `--params-b` (billions) if given, else the model's counted parameters."""
    if params_b is not None:
        if params_b <= 0:
            raise InputError(f"--params-b must be > 0, got {params_b}")
        return params_b * 1e9
    if geometry is None or geometry.num_params is None:
        raise InputError("--params-b is needed (no --model with a known parameter count)")
    return float(geometry.num_params)


def weight_bytes_total(geometry: Any | None, params: float, weight_dtype: str | None) -> float:
    """Bytes of all weights: params x the weight dtype (the model's, else bf16)."""
    from kvctl.sizing.dtypes import dtype_bytes

    name = weight_dtype or (geometry.weight_dtype if geometry is not None else "bf16")
    return params * dtype_bytes(name)


def resolve_gpu(name: str):
    """The GpuSpec for a GPU name (InputError naming the closest presets when unknown)."""
    from kvctl.sizing.hardware import resolve_gpu as _resolve

    return _resolve(name)

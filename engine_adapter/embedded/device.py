"""Which torch device the embedded engine puts SGLang's pools (and the tiny model) on.

    --device cpu    the default: the pools are bookkeeping-sized and CPU-bound
    --device cuda   SGLang's ReqToTokenPool, KV pool and paged allocator on the local GPU
    --device auto   cuda when torch.cuda.is_available(), else cpu

`resolve_device` runs at the CLI edge, before anything is built, so `--device cuda` on a
machine without CUDA is one line and exit 2, not a traceback from deep inside SGLang. torch
is imported only when the answer depends on it (not for cpu).
"""

from __future__ import annotations

from engine_adapter.base.errors import InputError

DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")
DEVICES: tuple[str, ...] = ("cpu", "cuda")  # what EngineConfig.device may hold


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(choice: str | None) -> str:
    """"cpu" or "cuda" for an operator's --device (None: cpu). Raises InputError for an
    unknown name, or for cuda where torch sees no CUDA device."""
    if choice is None or choice == "cpu":
        return "cpu"
    if choice not in DEVICE_CHOICES:
        raise InputError(f"unknown --device {choice!r}; valid: {', '.join(DEVICE_CHOICES)}")
    available = cuda_available()
    if choice == "auto":
        return "cuda" if available else "cpu"
    if not available:
        raise InputError(f"--device cuda: {cuda_unavailable_reason()}; use --device cpu or auto")
    return "cuda"


def cuda_unavailable_reason() -> str:
    import torch

    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"

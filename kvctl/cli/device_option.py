"""`--device auto|cpu|cuda`, shared by the commands that run the embedded engine (replay,
check, monitor, exporter): where SGLang's KV pool, page table and allocator (and the tiny
model, when one runs) live. Resolved before anything is built (engine_adapter/embedded/device.py)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvctl.errors import InputError

DeviceOption = Annotated[Optional[str], typer.Option(
    "--device", metavar="auto|cpu|cuda",
    help=("Device of SGLang's KV pool for the embedded engine: cpu (default), cuda, or auto "
          "(cuda when torch sees one)."))]


def resolve_device_option(choice: str | None, *, url_given: bool = False) -> str:
    """'cpu' or 'cuda'; InputError (exit 2) for an unknown name, cuda without CUDA, or a
    --device given with --url (a remote server's devices are its own)."""
    if url_given and choice is not None:
        raise InputError("--device applies to the embedded engine, not --url")
    from engine_adapter.embedded.device import resolve_device

    return resolve_device(choice)

"""Ports for a sandbox server: checked before a minute of start-up is spent, never guessed.

SGLang offsets a DP rank's KV-event endpoints by the rank (`ZmqEventPublisher.
offset_endpoint_port`), and kvctl's plugin serves rank r on `KVCTL_PLUGIN_PORT + r`
(engine_adapter/plugin/settings.py), so those roles need a block of dp_size consecutive ports::

    base      base+1   ...  base+dp_size-1
    rank 0    rank 1        rank dp_size-1

A free block is found by binding every port of it at once on the host, then releasing them
just before the server starts (a small race another process could win; the server's start
then fails with SGLang's own "address already in use" in the one-line error). Blocks are
drawn below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by default),
where nothing is handed out implicitly: a port the kernel picks for `bind(0)` is also one it
gives every outgoing connection, and once one of the many client sockets of a busy machine
(or a test suite) took the released port before SGLang bound it ("address already in use",
seen in CI).
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

from kvctl.errors import InputError

_TRIES = 64
_FLOOR = 20_000  # above the well-known and most registered services' ports
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    """The first port the kernel hands out implicitly (32768 when it does not say)."""
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bind(stack: ExitStack, host: str, port: int) -> int:
    sock = stack.enter_context(socket.socket())
    sock.bind((host, port))
    return sock.getsockname()[1]


def free_block(size: int, host: str = "127.0.0.1", avoid: set[int] | None = None) -> int:
    """The first port of `size` consecutive ports that are all free on `host` right now.

    `avoid`: ports already promised to another process that has not bound them yet (a fleet
    picks every server's ports before any starts); a block touching one is not taken, and
    the block taken is added to it."""
    high = _ephemeral_start() - size  # the last base whose block stays below the range
    for _ in range(_TRIES):
        with ExitStack() as stack:
            try:
                # below the ephemeral range; the kernel's pick only where that has no room
                base = _bind(stack, host, random.randrange(_FLOOR, high) if high > _FLOOR else 0)
                if base + size - 1 > 65535:
                    continue
                if avoid is not None and not avoid.isdisjoint(range(base, base + size)):
                    continue
                for offset in range(1, size):
                    _bind(stack, host, base + offset)
            except OSError:
                continue
            if avoid is not None:
                avoid.update(range(base, base + size))
            return base
    raise OSError(f"no block of {size} free consecutive ports on {host} after {_TRIES} tries")


def require_free(option: str, base: int, size: int, host: str = "127.0.0.1") -> None:
    """InputError naming `option` when any of base .. base+size-1 is taken on `host`."""
    for port in range(base, base + size):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise InputError(f"{option}: port {port} on {host} is in use ({exc.strerror}); "
                                 f"stop what holds it, or give {option} 0 for free ports"
                                 ) from None

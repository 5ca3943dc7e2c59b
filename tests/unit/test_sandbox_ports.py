"""Ports for the sandbox's server (kvctl/sandbox/ports.py): blocks below the kernel's
ephemeral range, free when picked; a taken port named in one line."""

from __future__ import annotations

import socket

import pytest

from kvctl.errors import InputError
from kvctl.sandbox import ports

pytestmark = pytest.mark.unit


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_block_lies_below_the_ephemeral_range_and_is_free():
    """Every port of the block is bindable, and the block ends before the first port the
    kernel gives outgoing connections (which could take a port bind(0) had picked)."""
    start = ports._ephemeral_start()
    for _ in range(20):
        base = ports.free_block(3)
        assert ports._FLOOR <= base and base + 2 < start
        assert all(_bindable(base + k) for k in range(3))


def test_without_room_below_the_range_the_kernels_pick_is_used(monkeypatch):
    """An ephemeral range that starts below the floor leaves no room: the block then starts
    where bind(0) puts it, still free."""
    monkeypatch.setattr(ports, "_ephemeral_start", lambda: 1024)
    base = ports.free_block(2)
    assert base >= 1024 and all(_bindable(base + k) for k in range(2))


def test_a_taken_port_is_named_with_the_option():
    """require_free: the option and the port in one InputError line."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(InputError, match=rf"--port: port {port} on 127.0.0.1 is in use"):
            ports.require_free("--port", port, 1)

"""Fixtures shared by the integration tests of this directory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def loopback_cls():
    """SGLang's loopback server (its real cache, publisher and metrics collectors); SGLang's
    mem_cache imports once per session (about 10 s)."""
    from support.loopback import LoopbackServer

    return LoopbackServer

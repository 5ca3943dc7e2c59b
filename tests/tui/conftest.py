"""Fixtures of the monitor's tests (the builders live in tui_helpers.py)."""

from __future__ import annotations

import pytest
from tui_helpers import paused_run


@pytest.fixture
def make_run():
    """paused_run(...) whose runs are closed after the test."""
    runs = []

    def build(*args, **kwargs):
        run = paused_run(*args, **kwargs)
        runs.append(run)
        return run

    yield build
    for run in runs:
        run.close()


@pytest.fixture
def anyio_backend():
    """Pilot tests run on asyncio (Textual's loop), through anyio's pytest plugin."""
    return "asyncio"

"""heap.tune sets glibc's thresholds (the peak-RSS effect is measured by bench_replay.py)."""

from __future__ import annotations

import platform

import pytest

from engine_adapter.embedded import heap

pytestmark = pytest.mark.unit


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_tune_sets_the_thresholds_once():
    """mallopt accepts both settings on glibc; a second call is a no-op that still says so."""
    assert heap.tune() is True
    assert heap.tune() is True

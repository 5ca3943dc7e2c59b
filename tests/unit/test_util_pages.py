"""kvctl.util.pages: the one ceiling-division and page-rounding helper."""

from __future__ import annotations

import pytest

from kvctl.util.pages import ceil_div, page_ceil, page_floor

pytestmark = pytest.mark.unit


def test_ceil_div_rounds_up_only_a_remainder():
    """31 tokens in pages of 16 take 2 pages, 32 take 2, 33 take 3; 0 takes none."""
    assert [ceil_div(n, 16) for n in (0, 1, 16, 31, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_ceil_div_is_exact_beyond_float_precision():
    """2^60 + 1 over 3: a float division would lose the remainder; the integer one cannot."""
    assert ceil_div(2**60 + 1, 3) == (2**60 + 1) // 3 + 1


def test_page_ceil_and_floor_bracket_a_length():
    """A 50-token extend from 16 with pages of 16 spans [16, 64): floor 16, ceil 64."""
    assert (page_floor(16, 16), page_ceil(50, 16)) == (16, 64)
    assert (page_floor(47, 16), page_ceil(48, 16)) == (32, 48)

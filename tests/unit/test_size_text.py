"""The one size parser behind every size option (kvctl/cli/size_text.py): a unit means that
unit, a bare number means the option's declared default unit, and the result is exact."""

from __future__ import annotations

import pytest

from kvctl.cli.size_text import parse_size
from kvctl.errors import InputError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "default_unit", "expected"),
    [
        ("80", "gb", 80_000_000_000),  # --hbm-gb 80: decimal GB
        ("80", "b", 80),  # --row-bytes 80: bytes
        ("80GiB", "gb", 80 * 2**30),
        ("80GiB", "b", 80 * 2**30),  # a unit given wins over either default
        ("4.35", "gb", 4_350_000_000),  # exact, not 4349999999 from float rounding
        ("64 KiB", "b", 65_536),
        ("1.5GB", "b", 1_500_000_000),
        ("1e3", "b", 1_000),
        ("2 MiB", "gb", 2 * 2**20),
        ("1.5tb", "gb", 1_500_000_000_000),
    ],
)
def test_sizes_in_bytes(text, default_unit, expected):
    """Each spelling gives the bytes worked out by hand."""
    assert parse_size(text, "--x", default_unit=default_unit) == expected


@pytest.mark.parametrize(
    ("text", "default_unit", "message"),
    [
        ("64 furlongs", "b",
         "--x: cannot read '64 furlongs' as a size (e.g. 65536 (bytes), 64KiB, 2MiB, 1.5GB)"),
        ("-5", "gb", "--x: cannot read '-5' as a size (e.g. 80 (GB), 80GiB, 512MiB)"),
        ("nan", "gb", "--x: cannot read 'nan' as a size (e.g. 80 (GB), 80GiB, 512MiB)"),
        ("1e999GiB", "gb", "--x: '1e999GiB' is too large for a size in bytes"),
        ("1.3", "b", "--x: '1.3' is not a whole number of bytes"),
        ("0.0000000001", "gb", "--x: '0.0000000001' is not a whole number of bytes"),
    ],
)
def test_unreadable_sizes_name_the_option(text, default_unit, message):
    """Garbage, negatives, overflow and fractions of a byte: one message naming the option."""
    with pytest.raises(InputError) as err:
        parse_size(text, "--x", default_unit=default_unit)
    assert str(err.value) == message


def test_zero_only_where_allowed():
    """A reserve may be 0; a memory size may not."""
    assert parse_size("0", "--reserve-gb", default_unit="gb") == 0
    with pytest.raises(InputError, match=r"^--hbm-gb must be positive, got '0GiB'$"):
        parse_size("0GiB", "--hbm-gb", default_unit="gb", allow_zero=False)

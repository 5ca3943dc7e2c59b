"""One parser for every size option: '80', '80GiB', '64 KiB', '1.5TB', '1e3' -> whole bytes.

A number with a unit means that unit (decimal kB/MB/GB/TB = 10^3k, binary KiB/MiB/GiB/TiB =
2^10k, B = bytes). A bare number means the option's `default_unit`, which each option
declares with its meaning: the hardware budget options (`--hbm-gb`, `--weights-gb`,
`--reserve-gb`, `--host-gb`) read it as GB, the byte-level plan options (`--row-bytes`,
`--page-group`, ...) as bytes. The arithmetic is exact (Fraction), so '4.35' GB is
4,350,000,000 bytes and a result that is not a whole number of bytes is refused rather
than rounded. Errors are InputError (exit 2, one line) naming the option.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from kvctl.errors import InputError

UNITS: dict[str, int] = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "g": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
MAX_BYTES = 2**63  # beyond any memory; also keeps the value an int64
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e\+?[0-9]+)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_EXAMPLES = {"gb": "80 (GB), 80GiB, 512MiB", "b": "65536 (bytes), 64KiB, 2MiB, 1.5GB"}


def parse_size(text: str, option: str, *, default_unit: str, allow_zero: bool = True) -> int:
    """Bytes that `text` names; a bare number is in `default_unit` (a key of UNITS)."""
    unit_bytes = UNITS[default_unit]  # KeyError: a programming error, not input
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or (unit and unit not in UNITS):
        example = _EXAMPLES.get(default_unit, "80GiB, 512MiB")
        raise InputError(f"{option}: cannot read {text!r} as a size (e.g. {example})")
    number = Decimal(match.group(1))  # exact: the regex admits only decimal digits
    # 10^30 is past any size with any unit: refuse before building a huge exact value
    value = (Fraction(number) * (UNITS[unit] if unit else unit_bytes)
             if number.adjusted() < 30 else Fraction(MAX_BYTES + 1))
    if value > MAX_BYTES:
        raise InputError(f"{option}: {text!r} is too large for a size in bytes")
    if value.denominator != 1:
        raise InputError(f"{option}: {text!r} is not a whole number of bytes")
    if value == 0 and not allow_zero:
        raise InputError(f"{option} must be positive, got {text!r}")
    return int(value)

"""Small argument checks shared by the planning calculators.

Each raises `InputError` with one line that names the offending input, so a calculator
never returns a number computed from a nonsensical one.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvctl.errors import InputError


def positive(name: str, value: float) -> None:
    """Raise InputError unless `value` > 0."""
    if not value > 0:
        raise InputError(f"{name} must be > 0, got {value}")


def non_negative(name: str, value: float) -> None:
    """Raise InputError unless `value` >= 0."""
    if not value >= 0:
        raise InputError(f"{name} must be >= 0, got {value}")


def fraction(name: str, value: float, *, allow_one: bool = False) -> None:
    """Raise InputError unless 0 <= `value` < 1 (or <= 1 with `allow_one`)."""
    upper_ok = value <= 1 if allow_one else value < 1
    if not (value >= 0 and upper_ok):
        bound = "[0, 1]" if allow_one else "[0, 1)"
        raise InputError(f"{name} must be in {bound}, got {value}")


def positive_ints(name: str, values: Iterable[int]) -> tuple[int, ...]:
    """Return `values` as a non-empty tuple of positive ints, or raise InputError."""
    items = tuple(values)
    if not items:
        raise InputError(f"{name} must name at least one value")
    for value in items:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"{name} must be positive integers, got {value!r}")
    return items


"""Shared by the remote-attach integration tests: fresh prompts, the page size, the tiny model.

Not a test module (no `test_` prefix); imported by name because pytest puts this directory
on sys.path for its test files.
"""

from __future__ import annotations

import itertools
from pathlib import Path

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_llama"
PAGE = 4
_fresh = itertools.count(1)


def prompt(length: int, *, prefix=()) -> list[int]:
    """A prompt no earlier test used (token ids unique per call), after `prefix`."""
    base = next(_fresh) * 1_000
    return list(prefix or []) + [base + i for i in range(length)]

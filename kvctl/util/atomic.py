"""Write files so that a reader sees either the old content or the whole new content.

Every output kvctl writes (reports, CSVs, plots) goes through here: write to a temporary
file in the same directory, fsync, then rename over the target. A crash or a bad input in
the middle leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield a temp file next to `path`; rename it over `path` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get normal modes
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Atomically write `data` as indented, key-sorted JSON with a trailing newline."""
    with atomic_open(path) as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")

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


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder next to `path`; put it in place of `path` as a whole
    only if the block succeeds.

        parent/.out.XXXX.tmp   <- the block writes every file here
        parent/out             <- old folder moved aside to .out.XXXX.old, then the new one
                                  renamed in, then the old one removed

    A failure or Ctrl-C inside the block removes the temporary folder: `path` keeps its old
    content (or stays absent), never a mix of old and new files. The caller checks that an
    existing `path` may be replaced (kvctl.util.inputs.check_out_dir) before any work.
    """
    import shutil

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; outputs get normal modes
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old",
                                        dir=target.parent))
            os.replace(target, old)  # an empty dir is replaced by rename(2)
        try:
            os.replace(tmp, target)
        except BaseException:
            if old is not None:
                os.replace(old, target)  # put the old folder back
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

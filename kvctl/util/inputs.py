"""One way to take a file from the user: checked, decoded and parsed, or one InputError.

Every file-taking command reads through here, so every one gives the same one-line answer
for the same mistake, naming the file and, where it can, the line:

    check_input_file  exists, is a regular file (not a folder, not a FIFO)
    read_text         + readable, UTF-8 (`g.yaml:3: not UTF-8 text (byte 0xd6 ...)`)
    load_yaml         + parses as YAML (`s.yaml:12: not valid YAML (...)`)
    load_json         + parses as JSON (`c.json:4: not valid JSON (...)`)
    check_out_dir     an output folder kvctl may (re)place: checked before any work

Large line-oriented inputs (Mooncake traces) are decoded line by line by their reader
(kvctl.replay.mooncake), which uses `check_input_file` and `decode_line` from here.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from kvctl.errors import InputError

# The files an output folder of kvctl holds (kvctl.replay.plots); an existing folder is
# replaced only if it holds nothing else (sweeps: one such folder per run inside).
OUTPUT_FILES = frozenset({"report.json", "timeline.csv", "utilization.png", "hit_rate.png",
                          "sweep.json", "hit_rate_vs_pool.png"})


def is_kvctl_output(folder: Path, *, depth: int = 1) -> bool:
    """True if `folder` holds only what kvctl writes with --out (or nothing)."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            if depth == 0 or not is_kvctl_output(entry, depth=depth - 1):
                return False
        elif entry.name not in OUTPUT_FILES:
            return False
    return True


def _label(what: str, path: Path) -> str:
    return f"{what} {path}" if what else str(path)


def check_input_file(path: str | os.PathLike, *, what: str = "") -> Path:
    """The path as a Path if it names an existing regular file; InputError otherwise."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{_label(what, path)}: no such file") from None
    except OSError as err:
        raise InputError(f"{_label(what, path)}: cannot read ({err.strerror or err})") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{_label(what, path)}: is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{_label(what, path)}: not a regular file")
    return path


def decode_line(raw: bytes, *, path: str | os.PathLike, line: int) -> str:
    """One line of a text file as str; InputError `path:line: not UTF-8 text` otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x} at "
                         f"column {err.start + 1})") from None


def read_text(path: str | os.PathLike, *, what: str = "") -> str:
    """The whole file decoded as UTF-8; InputError naming the file and the bad line."""
    path = check_input_file(path, what=what)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{_label(what, path)}: cannot read ({err.strerror or err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x}); "
                         f"{what or 'the input'} must be a UTF-8 text file") from None


def load_yaml(path: str | os.PathLike, *, what: str = "") -> Any:
    """Parse a YAML file (safe loader); InputError `path:line: not valid YAML (problem)`."""
    import yaml

    text = read_text(path, what=what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or (str(err).splitlines() or ["malformed"])[0]
        raise InputError(f"{path}{where}: not valid YAML ({problem})") from None


def load_json(path: str | os.PathLike, *, what: str = "") -> Any:
    """Parse a JSON file; InputError `path:line: not valid JSON (message)`."""
    text = read_text(path, what=what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None


def check_out_dir(path: str | os.PathLike, *, what: str = "--out") -> Path:
    """Check, before any work, that an output folder can be written as a whole set.

    Refused: an existing file; a folder that holds anything kvctl does not write
    (OUTPUT_FILES, is_kvctl_output); the working folder or one above it; a place where nothing
    can be created (probed by creating and removing a temporary folder in the nearest
    existing parent). Nothing is left behind by the check.
    """
    path = Path(path)
    label = _label(what, path)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise InputError(f"{label}: exists and is not a folder")
        resolved = path.resolve()
        cwd = Path.cwd().resolve()
        if resolved == cwd or resolved in cwd.parents:
            raise InputError(f"{label}: is the working folder or holds it; give a new folder")
        if not is_kvctl_output(path):
            raise InputError(f"{label}: folder holds files kvctl did not write; give a new or "
                             "empty folder (kvctl replaces an output folder as a whole)")
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{label}: {parent} is not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
    except OSError as err:
        raise InputError(f"{label}: cannot write in {parent} ({err.strerror or err})") from None
    os.rmdir(probe)
    return path

"""Turn recorded requests into a Mooncake JSONL trace plus a `.meta.json` sidecar, atomically.

Mooncake's format (kvcache-ai/Mooncake FAST25-release/traces), one line per request:

    {"timestamp": ms since the first arrival, "input_length": L, "output_length": O,
     "hash_ids": [dense ids of the chained block hashes]}

Hash digests are remapped to dense integers in first-seen order, as Mooncake's release does,
so the file carries neither the salt's digests nor anything derived from token ids beyond
"this block equals that block". The sidecar states the block size, the drop count, the
server's model and page size, and `token_ids_stored: false`.

Both files are written to temporary names in the destination folder and renamed into place;
on any failure (full disk, unwritable folder) both temporaries are removed and an InputError
or RuntimeFailure names the problem. An existing trace at the destination is only replaced
by a complete new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from engine_adapter.recording.recorder import TrafficRecord
from kvctl.errors import RuntimeFailure
from kvctl.replay.trace_blocks import sidecar_path

SCHEMA_VERSION = 1


def mooncake_rows(records: Iterable[TrafficRecord]) -> tuple[list[dict], int]:
    """Rows in arrival order (ties by arrival sequence, then finish sequence) with dense
    first-seen hash ids, and the number of records skipped because they produced no output
    (Mooncake needs >= 1)."""
    ordered = sorted(records, key=lambda r: (r.arrival_s, r.arrival_seq, r.seq))
    dense: dict[bytes, int] = {}
    rows: list[dict] = []
    skipped = 0
    origin = ordered[0].arrival_s if ordered else 0.0
    for record in ordered:
        if record.output_length <= 0:
            skipped += 1
            continue
        ids = [dense.setdefault(digest, len(dense)) for digest in record.blocks]
        rows.append({"timestamp": int(round((record.arrival_s - origin) * 1000)),
                     "input_length": record.input_length,
                     "output_length": record.output_length, "hash_ids": ids})
    return rows, skipped


def meta_path(trace: str | Path) -> Path:
    """The sidecar of `trace.jsonl` is `trace.meta.json` (what `kvctl replay` reads)."""
    return sidecar_path(trace)


def write_recording(out: str | Path, records: Iterable[TrafficRecord], meta: dict) -> dict:
    """Write the trace and its sidecar; returns the sidecar document written."""
    out = Path(out)
    rows, skipped = mooncake_rows(records)
    document = {"schema_version": SCHEMA_VERSION, "format": "mooncake-jsonl",
                **meta, "requests": len(rows), "skipped_no_output": skipped,
                "distinct_blocks": len({b for row in rows for b in row["hash_ids"]}),
                "token_ids_stored": False, "text_stored": False}
    trace_text = "".join(json.dumps(row) + "\n" for row in rows)
    meta_text = json.dumps(document, indent=2) + "\n"
    temporaries: list[str] = []
    try:
        for text in (trace_text, meta_text):
            fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
            temporaries.append(name)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporaries[1], meta_path(out))
        os.replace(temporaries[0], out)
        temporaries.clear()
    except OSError as err:
        raise RuntimeFailure(f"cannot write {out}: {err.strerror or err}") from None
    finally:
        for name in temporaries:
            try:
                os.unlink(name)
            except OSError:
                pass
    return document


def check_destination(out: str | Path, *, what: str = "--out",
                      example: str = "trace.jsonl") -> Path:
    """Fail before recording when `out` cannot be written: its folder must exist and be
    writable, and `out` must not be a folder. `what`: the option named in the error."""
    from kvctl.errors import InputError

    out = Path(out)
    if out.is_dir():
        raise InputError(f"{what} {out} is a folder; give a file name such as {out}/{example}")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{what} {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise InputError(f"{what} {out}: folder {folder} is not writable")
    try:  # what access() cannot see: a read-only mount, no inodes left
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{out.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise InputError(f"{what} {out}: cannot write in {folder} ({err.strerror or err})") \
            from None
    return out

"""The block size of a Mooncake-format trace: Mooncake's 512 tokens, or what the trace's
sidecar says.

`kvctl record` writes `NAME.meta.json` beside `NAME.jsonl` (kvctl/record/writer.py); its
`block_tokens` is the number of prompt tokens each `hash_ids` entry stands for, and its
`page_size` the recorded server's. A trace without a sidecar is a Mooncake release trace:
512-token blocks.

    hash_ids:  [ b0        | b1        | ... | b(n-1)          ]
    tokens:     0          B           2B    (n-1)B     input_length      B = block_tokens

Pages and blocks must align (`check_block_pages`): a page that divides B (the recorded
server's page, or a finer one) is shared exactly when its block is, as on the recorded
server; a page that is a multiple of B spans whole blocks (a what-if with larger pages:
shared when all its blocks are). A page that does neither would straddle block boundaries
and is refused. Every problem is an InputError naming the sidecar (one line, exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

from engine_adapter.embedded.page_hashes import BLOCK_TOKENS
from kvctl.errors import InputError


def sidecar_path(trace: str | Path) -> Path:
    """The sidecar of `trace.jsonl` is `trace.meta.json`."""
    trace = Path(trace)
    return trace.with_name(trace.name.removesuffix(".jsonl") + ".meta.json")


def read_sidecar(trace: str | Path) -> dict:
    """The sidecar document, or {} when the trace has none. InputError if unreadable."""
    sidecar = sidecar_path(trace)
    if not sidecar.is_file():
        return {}
    try:
        document = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read {sidecar}: {getattr(err, 'strerror', None) or err}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{sidecar}: not valid JSON ({err.msg})") from None
    if not isinstance(document, dict):
        raise InputError(f"{sidecar}: expected a JSON object")
    return document


def trace_block_tokens(trace: str | Path) -> int:
    """Tokens per hash id: the sidecar's `block_tokens`, else 512 (Mooncake's)."""
    value = read_sidecar(trace).get("block_tokens", BLOCK_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{sidecar_path(trace)}: block_tokens must be a positive integer, "
                         f"got {value!r}")
    return value


def recorded_page_size(trace: str | Path) -> int | None:
    """The recorded server's page size from the sidecar, if it names a usable one."""
    value = read_sidecar(trace).get("page_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_block_pages(trace: str | Path, block_tokens: int, page_size: int) -> None:
    """InputError unless pages and blocks align (module docstring)."""
    if block_tokens % page_size == 0 or page_size % block_tokens == 0:
        return
    where = (f"{sidecar_path(trace).name} says {block_tokens}-token blocks"
             if block_tokens != BLOCK_TOKENS else f"{block_tokens}-token blocks")
    raise InputError(f"{Path(trace).name}: {where}, which pages of {page_size} tokens would "
                     f"straddle: give a --page-size that divides {block_tokens} (e.g. "
                     f"{_largest_divisor_at_most(block_tokens, page_size)}) or is a "
                     f"multiple of it")


def _largest_divisor_at_most(value: int, limit: int) -> int:
    return max(d for d in range(1, min(value, limit) + 1) if value % d == 0)

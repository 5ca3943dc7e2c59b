"""One validation layer for every command's options, run before the command's body.

`validate_commands(app)` wraps the callback of every registered command (sub-groups too) so
that its parsed options are checked here, in one place, before any work starts. A bad value
raises `InputError` (one line, exit 2) naming the option and the value:

    any float          finite (NaN and infinity are never a size, a rate or a time)
    any int or float   within its RULES entry; an option without one: >= 0, <= MAX_INT
    FILE_OPTIONS       exists and is a regular file (kvctl.util.inputs.check_input_file)
    OUT_OPTIONS        writable, not an existing file (kvctl.util.inputs.check_out_dir)
    URL_OPTIONS        an http(s)://HOST:PORT address (--url, --plugin-url), before any
                       connection, so a typo is not reported as a dead server
    --plugin-token     a bearer token: non-empty, printable, no spaces (never echoed)

RULES is keyed by the Python parameter name (`page_size` for `--page-size`) so that a new
command inherits the rule of an option it shares with others. Domain checks that need more
than one option (a pool smaller than a request) stay with the domain code.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvctl.errors import InputError

# Beyond 2^53 an int no longer round-trips through a float (JSON, numpy float64): no token
# count, byte count or port kvctl handles comes near it.
MAX_INT = 2**53
MAX_TOKENS = 2**40  # about 10^12 tokens: far beyond any pool, context or trace
MAX_PAGE = 65_536  # tokens per page; SGLang's kernels use 1 to 256


@dataclass(frozen=True)
class Range:
    """Allowed values of one numeric option: [low, high], either end open or absent."""

    low: float | None = 0
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def allows(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self, value: float) -> str:
        """Why `value` is refused, naming the bound it crosses (a sanity cap only if crossed)."""
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            if self.low is not None and self.high <= 1:  # a share: show the whole range
                left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
                return f"must be in {left}{_num(self.low)}, {_num(self.high)}{right}"
            return f"must be {'below' if self.high_open else 'at most'} {_num(self.high)}"
        if self.low == 0 and self.low_open or (self.integer and self.low == 1):
            return "must be positive"
        if self.low == 0:
            return "must not be negative"
        if self.high is not None and self.high <= 1:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"must be in {left}{_num(self.low)}, {_num(self.high)}{right}"
        return f"must be {'>' if self.low_open else '>='} {_num(self.low)}"


def _num(value: float | None) -> str:
    if value is None:
        return "-inf"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


POSITIVE_INT = Range(low=1, high=MAX_INT, integer=True)
TOKENS = Range(low=1, high=MAX_TOKENS, integer=True)
TOKENS_OR_ZERO = Range(low=0, high=MAX_TOKENS, integer=True)
POSITIVE = Range(low=0, low_open=True)
NON_NEGATIVE = Range(low=0)
FRACTION = Range(low=0, high=1, low_open=True)  # a share that must be > 0: MFU, tau_high
DEVICES = Range(low=1, high=4096, integer=True)

RULES: dict[str, Range] = {
    # parallelism and counts
    "tp": DEVICES, "pp": DEVICES, "gpus": DEVICES, "parallel": Range(1, 256, integer=True),
    "steps": POSITIVE_INT, "limit": POSITIVE_INT, "max_running": POSITIVE_INT,
    "trajectories": POSITIVE_INT, "branches": POSITIVE_INT, "batch": POSITIVE_INT,
    "decode_batch": POSITIVE_INT, "handles": Range(0, MAX_INT, integer=True),
    "seed": Range(0, 2**63 - 1, integer=True), "port": Range(0, 65_535, integer=True),
    "plugin_port": Range(0, 65_535, integer=True), "dp_size": Range(1, 16, integer=True),
    "replicas": POSITIVE_INT,
    # plan recommend --trace: the fleet runner's MAX_REPLICAS (kvctl/fleet/runner.py; not
    # imported here, a unit test keeps the two equal)
    "max_replicas": Range(1, 32, integer=True),
    # token counts and geometry
    "page_size": Range(1, MAX_PAGE, integer=True), "block_size": Range(1, MAX_PAGE, integer=True),
    "pool_tokens": TOKENS_OR_ZERO, "token_budget": TOKENS, "decode_quantum": TOKENS,
    "context": TOKENS, "context_length": TOKENS, "output": TOKENS_OR_ZERO, "prompt": TOKENS, "chunk": TOKENS,
    "mean_length": TOKENS, "max_context": TOKENS, "shared_tokens": TOKENS_OR_ZERO,
    "branch_tokens": TOKENS_OR_ZERO, "branch_offset": TOKENS_OR_ZERO, "prefix": TOKENS_OR_ZERO,
    "offset": TOKENS_OR_ZERO, "pool_slots": TOKENS, "slots": TOKENS, "threshold": TOKENS,
    "kv_heads": POSITIVE_INT, "head_dim": POSITIVE_INT, "layers": POSITIVE_INT,
    "value_dim": POSITIVE_INT, "bytes_per_token": POSITIVE_INT, "kv_row_bytes": POSITIVE_INT,
    "kernel_entry_bytes": POSITIVE_INT, "output_bytes": POSITIVE_INT,
    "state_bytes": POSITIVE_INT,
    # shares and ratios
    "tau_high": FRACTION, "mfu": FRACTION, "prefill_mfu": FRACTION, "decode_mfu": FRACTION,
    "link_efficiency": FRACTION, "mem_fraction": FRACTION, "mu": Range(0, 1),
    "cache_threshold": Range(0, 1), "balance_rel_threshold": POSITIVE,
    "headroom": Range(0, 1, high_open=True), "sharing_factor": Range(low=1),
    "dram_price_ratio": Range(0, 1, high_open=True),
    # sizes, rates and times that must be > 0
    "pool_gb": POSITIVE, "hbm_gb": POSITIVE, "params_b": POSITIVE, "prefill_tflops": POSITIVE,
    "peak_tflops": POSITIVE, "hbm_tbps": POSITIVE, "link_gbps": POSITIVE, "nvme_gbps": POSITIVE,
    "itl_target_ms": POSITIVE, "arrival_rate": POSITIVE, "generation_seconds": POSITIVE,
    "gamma": POSITIVE, "interval": POSITIVE, "refresh": POSITIVE, "duration": POSITIVE,
    "timeout": POSITIVE,
}

# Options that name an input file (checked: exists, regular file) and an output folder.
FILE_OPTIONS = frozenset({"workload", "scenario", "trace", "layout", "validate_with_replay",
                          "prompt_file"})
OUT_OPTIONS = frozenset({"out"})
POSITIONAL = frozenset({"workload", "layout"})  # arguments: the message names just the path


# Parameters whose first flag is not their name spelled out (`kvctl replay`'s token_budget is
# SGLang's --chunked-prefill-size; --token-budget is its older alias).
FLAG_NAMES = {"token_budget": "--chunked-prefill-size"}


def flag_name(name: str) -> str:
    """The command-line spelling of a parameter (`page_size` -> `--page-size`)."""
    return FLAG_NAMES.get(name) or "--" + name.replace("_", "-")


def check_number(name: str, value: int | float) -> None:
    """Raise InputError unless `value` is finite and inside RULES[name] (default: >= 0)."""
    label = flag_name(name)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{label} must be a finite number, got {value}")
    rule = RULES.get(name, Range(low=0, high=MAX_INT))
    if not rule.allows(value):
        shown = f"{value:g}" if isinstance(value, float) else f"{value}"
        raise InputError(f"{label} {rule.describe(value)}, got {shown}")


def _dtype(value: str) -> None:
    from kvctl.sizing.dtypes import canonical_dtype

    canonical_dtype(value)


def _choice(*allowed: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in allowed:
            raise InputError(f"{value!r} is not one of {', '.join(allowed)}")
    return check


def _eviction(value: str) -> None:
    from engine_adapter.embedded.config import EVICTION_POLICIES  # no SGLang import

    _choice(*EVICTION_POLICIES)(value)


# Text options with a closed set of values, checked whether or not the command ends up
# using them (a typo in an option that happens not to matter is still a typo).
def _model(value: str) -> None:
    from kvctl.sizing.models import resolve_model  # a preset or a config.json: no torch

    resolve_model(value)


def _gpu(value: str) -> None:
    from kvctl.sizing.hardware import resolve_gpu

    resolve_gpu(value)


def _link(value: str) -> None:
    from kvctl.sizing.plan.links import HOST_LINKS

    if value not in HOST_LINKS:
        raise InputError(f"unknown interconnect {value!r} (known: {', '.join(HOST_LINKS)})")


def _retention(value: str) -> None:
    from kvctl.replay.runner import RETENTION_CHOICES

    if value not in RETENTION_CHOICES:
        raise InputError(f"unknown retention {value!r}; valid: {', '.join(RETENTION_CHOICES)}")


def _fault(value: str) -> None:
    from engine_adapter.embedded.faults import FAULTS

    if value not in FAULTS:
        raise InputError(f"unknown fault {value!r}; valid: {', '.join(FAULTS)}")


def _slo(value: str) -> None:
    from kvctl.fleet.recommend import parse_slo  # no engine import

    parse_slo(value)


def _routers(value: str) -> None:
    from kvctl.fleet.recommend import parse_routers

    parse_routers(value)


TEXT_RULES: dict[str, Callable[[str], None]] = {
    "kv_dtype": _dtype, "weight_dtype": _dtype, "tree_core": _choice("rust", "python"),
    "eviction": _eviction, "model": _model, "gpu": _gpu, "link": _link,
    "retention": _retention, "inject_fault": _fault, "slo": _slo, "routers": _routers,
}


def _url(name: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        from engine_adapter.remote.http_fetch import normalize_base_url  # stdlib only

        normalize_base_url(value, what=flag_name(name))
    return check


def _bearer_token(value: str) -> None:
    """RFC 6750 token68-like: what can follow `Bearer ` in one header line. The message
    never repeats the value (it is a secret)."""
    if not value or any(not ("!" <= char <= "~") for char in value):
        raise InputError("--plugin-token must be a non-empty token of printable characters "
                         "without spaces")


# Options whose text is checked as a whole and whose message is the checker's own.
URL_OPTIONS: dict[str, Callable[[str], None]] = {
    "url": _url("url"), "plugin_url": _url("plugin_url"), "plugin_token": _bearer_token,
}


def check_option(name: str, value: Any) -> None:
    """Check one parsed option value by its parameter name; None (not given) always passes."""
    from kvctl.util.inputs import check_input_file, check_out_dir

    if value is None or isinstance(value, bool):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            check_option(name, item)
        return
    if isinstance(value, (int, float)):
        check_number(name, value)
    elif name in URL_OPTIONS and isinstance(value, str):
        URL_OPTIONS[name](value)
    elif name in TEXT_RULES and isinstance(value, str):
        try:
            TEXT_RULES[name](value)
        except InputError as err:
            raise InputError(f"{flag_name(name)}: {err}") from None
    elif name in FILE_OPTIONS and isinstance(value, (str, Path)):
        check_input_file(value, what="" if name in POSITIONAL else flag_name(name))
    elif name in OUT_OPTIONS and isinstance(value, (str, Path)):
        check_out_dir(value, what=flag_name(name))


def validated(func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command callback: check every option it receives, then call it. Typer still
    sees the original signature (functools.wraps sets __wrapped__)."""
    if getattr(func, "__kvctl_validated__", False):
        return func
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name, value in signature.bind_partial(*args, **kwargs).arguments.items():
            check_option(name, value)
        return func(*args, **kwargs)

    wrapper.__kvctl_validated__ = True  # type: ignore[attr-defined]
    return wrapper


def validate_commands(app: Any) -> None:
    """Wrap every command registered on a Typer app and on its sub-groups, recursively."""
    for command in app.registered_commands:
        if command.callback is not None:
            command.callback = validated(command.callback)
    for group in app.registered_groups:
        validate_commands(group.typer_instance)

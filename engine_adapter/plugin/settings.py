"""The plugin's environment, read once per process (docs/plugin.md lists every variable).

    KVCTL_SGLANG_PLUGIN=1            enable (or name `kvctl` in SGLang's SGLANG_PLUGINS)
    KVCTL_PLUGIN_HOST=127.0.0.1      bind address of the endpoint (loopback by default)
    KVCTL_PLUGIN_PORT=30100          base port; a scheduler serves on base + its DP rank
    KVCTL_PLUGIN_TOKEN               bearer token every request must carry; required for a
                                     bind that is not loopback (bind_refusal)
    KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1  serve a non-loopback bind without a token anyway
                                     (logged as a warning at every start)
    KVCTL_PLUGIN_LEDGER_S=1.0        seconds between samples (ledger + reconciliation)
    KVCTL_PLUGIN_TREE_S=10.0         seconds between per-node tree reads
    KVCTL_PLUGIN_MAX_FAILURES=5      exceptions before the plugin disables itself
    KVCTL_PLUGIN_STEP_TIMING         unset: time scheduler steps once /step_samples is read
                                     (kvctl calibrate, record, replay --against) until nobody
                                     read it for 10 minutes; 1: from startup; 0: never
    KVCTL_PLUGIN_WHATIF_RATE=0.01    sample rate of the what-if shadow (instrument/whatif.py);
                                     0 turns it off

Pure: `from_env` takes the mapping to read, raises `InputError` naming the variable.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass

from engine_adapter.base.errors import InputError

ENTRY_POINT_NAME = "kvctl"
# The scheduler attribute holding its PluginRuntime: set by attach.py, read by hooks.py (here,
# below both, so that neither imports the other).
RUNTIME_ATTR = "_kvctl_plugin"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def plugin_enabled(environ: Mapping[str, str]) -> bool:
    """True only when the operator asked for the plugin explicitly: installing kvctl never
    changes a server silently."""
    if environ.get("KVCTL_SGLANG_PLUGIN", "").strip() == "1":
        return True
    whitelist = environ.get("SGLANG_PLUGINS", "")
    return ENTRY_POINT_NAME in {name.strip() for name in whitelist.split(",")}


@dataclass(frozen=True, kw_only=True)
class PluginSettings:
    host: str = "127.0.0.1"
    port_base: int = 30100
    token: str | None = None
    ledger_s: float = 1.0
    tree_s: float = 10.0
    max_failures: int = 5
    step_timing: bool = True
    step_timing_from_start: bool = False  # KVCTL_PLUGIN_STEP_TIMING=1 (unset: on demand)
    whatif_rate: float = 0.01
    allow_unauthenticated: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> PluginSettings:
        return cls(
            host=environ.get("KVCTL_PLUGIN_HOST", cls.host),
            port_base=_int(environ, "KVCTL_PLUGIN_PORT", cls.port_base, low=1, high=65535),
            token=environ.get("KVCTL_PLUGIN_TOKEN") or None,
            ledger_s=_seconds(environ, "KVCTL_PLUGIN_LEDGER_S", cls.ledger_s),
            tree_s=_seconds(environ, "KVCTL_PLUGIN_TREE_S", cls.tree_s),
            max_failures=_int(environ, "KVCTL_PLUGIN_MAX_FAILURES", cls.max_failures, low=1),
            step_timing=_step_timing(environ) != "0",
            step_timing_from_start=_step_timing(environ) == "1",
            whatif_rate=_rate(environ, "KVCTL_PLUGIN_WHATIF_RATE", cls.whatif_rate),
            allow_unauthenticated=_switch(environ, "KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED"),
        )

    @property
    def loopback_only(self) -> bool:
        """True when the bind address is reachable from this host only."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False  # a wildcard ("") or a hostname: assume other hosts can reach it

    def bind_refusal(self) -> str | None:
        """Why the endpoint must not start, or None. /snapshot, /receipts and /records carry
        request ids, namespace labels and (recording) the traffic's block structure: a bind
        other hosts can reach needs KVCTL_PLUGIN_TOKEN, or an explicit opt-out."""
        if self.loopback_only or self.token is not None or self.allow_unauthenticated:
            return None
        return (f"not serving on {self.host or '*'}:{self.port_base}: a non-loopback bind "
                "needs KVCTL_PLUGIN_TOKEN (set it, and pass --plugin-token to kvctl), or "
                "KVCTL_PLUGIN_HOST=127.0.0.1, or KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1 to serve "
                "it to anyone who can reach the port")

    def exposure_warning(self) -> str | None:
        """The warning logged at every start of an opted-in unauthenticated public bind."""
        if self.loopback_only or self.token is not None:
            return None
        return (f"serving /snapshot, /receipts and /records on {self.host or '*'} WITHOUT "
                "authentication (KVCTL_PLUGIN_ALLOW_UNAUTHENTICATED=1): anyone who can reach "
                "the port reads request ids and namespace labels; set KVCTL_PLUGIN_TOKEN")

    def port(self, dp_rank: int) -> int:
        """The port the scheduler of `dp_rank` serves on (as SGLang's KV-event endpoints:
        base + rank)."""
        return self.port_base + dp_rank

    def url(self, dp_rank: int = 0, *, server_host: str | None = None) -> str:
        """The endpoint of `dp_rank`. A wildcard bind is reachable at the server's own host."""
        host = self.host
        if host in WILDCARD_HOSTS:
            host = server_host or "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port(dp_rank)}"


def _int(environ: Mapping[str, str], name: str, default: int, *, low: int,
         high: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InputError(f"{name}={value} must be {bound}")
    return value


def _step_timing(environ: Mapping[str, str]) -> str:
    """KVCTL_PLUGIN_STEP_TIMING: "" (on demand), "1" (from startup) or "0" (off)."""
    raw = environ.get("KVCTL_PLUGIN_STEP_TIMING", "").strip()
    if raw not in ("", "0", "1"):
        raise InputError(f"KVCTL_PLUGIN_STEP_TIMING={raw!r} must be 1 (time every step from "
                         "startup), 0 (never) or unset (time steps once /step_samples is read)")
    return raw


def _switch(environ: Mapping[str, str], name: str) -> bool:
    raw = environ.get(name, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise InputError(f"{name}={raw!r} must be 1 (on) or 0 (off)")


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    return _float(environ, name, default, unit=" of seconds",
                  valid=lambda v: math.isfinite(v) and v >= 0,
                  bound="a finite number of seconds >= 0")


def _rate(environ: Mapping[str, str], name: str, default: float) -> float:
    return _float(environ, name, default, unit="", valid=lambda v: 0.0 <= v <= 1.0,
                  bound="a rate in [0, 1] (0 turns the what-if shadow off)")


def _float(environ: Mapping[str, str], name: str, default: float, *, unit: str, valid,
           bound: str) -> float:
    """`name` from `environ` as a float (`default` when unset or blank); InputError naming
    the variable when it does not parse or `valid(value)` is false."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{name}={raw!r} is not a number{unit}") from None
    if not valid(value):
        raise InputError(f"{name}={raw} must be {bound}")
    return value

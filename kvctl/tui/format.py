"""Presentation helpers shared by the widgets: numbers, shares and "not observable" text.

Pure: no Textual, no I/O. A quantity the source cannot observe is `None` in the snapshot
(engine_adapter/snapshot.py) and is rendered as NOT_OBSERVABLE, never as 0 or 100%.
"""

from __future__ import annotations

from rich.text import Text

from engine_adapter.snapshot import Snapshot

NOT_OBSERVABLE = "not observable"
NOT_OBSERVABLE_REMOTE = "not observable (remote)"
DASH = "—"


def is_remote(snapshot: Snapshot) -> bool:
    """A remote attach publishes no per-request or per-node state (see remote/snapshot_build)."""
    return snapshot.info.engine == "remote"


def unobservable(snapshot: Snapshot) -> str:
    """The "not observable" wording for this source (remote sources say why)."""
    return NOT_OBSERVABLE_REMOTE if is_remote(snapshot) else NOT_OBSERVABLE


def tokens(value: int | None, snapshot: Snapshot | None = None) -> str:
    """1,234,567 with thousands separators; the "not observable" text for None."""
    if value is None:
        return unobservable(snapshot) if snapshot is not None else NOT_OBSERVABLE
    return f"{value:,}"


def share(part: int | None, whole: int) -> str:
    """A percentage of `whole` with one decimal, or "" when it cannot be computed."""
    if part is None or whole <= 0:
        return ""
    return f"{100.0 * part / whole:.1f}%"


def ratio(value: float | None, digits: int = 3) -> str:
    """A 0..1 quantity (U_KV, token_usage, H_prefix) or "n/a" before there is any."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def signed(value: int) -> str:
    return f"{value:+,d}"


def seconds(value: float) -> str:
    if value < 1.0:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def dim(text: str) -> Text:
    return Text(text, style="dim")


def label_value(label: str, value: str, *, value_style: str = "bold") -> Text:
    """`label value` with the label dimmed: the house style of every panel line."""
    return Text.assemble((label, "dim"), " ", (value, value_style))


def count(value: int | None) -> str:
    """An integer with separators, or the dash when it is unknown."""
    return DASH if value is None else f"{value:,}"


def whatif(snapshot: Snapshot) -> str:
    """The what-if line shared by `kvctl inspect` and `kvctl monitor`: '2x pool: 31.0% ->
    37.2% (est., LRU; 1x measured 30.8%)' (docs/curve.md), or not observable where no what-if
    shadow runs (a server without the kvctl plugin), never 0."""
    if snapshot.whatif is None:
        return f"{NOT_OBSERVABLE} (needs the kvctl plugin)"
    return snapshot.whatif.gain_line(2.0)

"""The pool ledger in numbers (seed 000 0x0CF): each partition in tokens, pages and share,
the residual (a leak when non-zero), paged tail waste (seed 000 0x02G) and the host tier.
Rendered as fixed-width Text (not a Rich Table): it is redrawn on every refresh."""

from __future__ import annotations

from rich.text import Text

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.host_tier import host_tier_rows
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic
from kvctl.tui.widgets.pool.partition import SEGMENT_STYLES, segments


def _row(
    text: Text,
    name: str,
    tokens: str,
    pages: str,
    share: str,
    *,
    mark: str | None,
    token_style: str = "",
) -> None:
    if len(text):
        text.append("\n")
    if mark is not None:
        text.append("■ ", style=mark).append(f"{name:<10}")
    else:
        text.append(f"{name:<12}", style="dim")
    text.append(f"{tokens:>10}", style=token_style).append(f"  {pages:>9}").append(f"  {share:>6}")


def ledger_text(snapshot: Snapshot) -> Text:
    ledger = snapshot.ledger
    text = Text()
    for part in segments(ledger):
        if part.name != "residual":
            _row(
                text,
                part.name,
                f"{part.tokens:,}",
                f"{ledger.pages(part.tokens):,} pg",
                fmt.share(part.tokens, ledger.pool_tokens),
                mark=SEGMENT_STYLES[part.name],
            )
    residual = ledger.residual_tokens
    verdict = "leak!" if residual > 0 else ("double count!" if residual < 0 else "ok")
    _row(
        text,
        "residual",
        f"{residual:,}",
        verdict,
        "",
        mark=SEGMENT_STYLES["residual"],
        token_style="bold red" if residual else "green",
    )
    _row(
        text,
        "pool",
        f"{ledger.pool_tokens:,}",
        f"{ledger.pages(ledger.pool_tokens):,} pg",
        "",
        mark=None,
    )
    text.append(f"  page {ledger.page_size}", style="dim")
    tail = ledger.tail_slots
    _row(text, "tail waste", fmt.DASH if tail is None else f"{tail:,}", "", "", mark=None)
    host = (fmt.DASH if ledger.host_tokens is None else f"{ledger.host_tokens:,}") + (
        f" / {ledger.host_capacity_tokens:,}" if ledger.host_capacity_tokens else ""
    )
    text.append("host tier ", style="dim").append(host)
    for label, value in host_tier_rows(snapshot):  # SGLang HiCache (kvctl/tui/host_tier.py)
        text.append(f"\n{label:<34}", style="dim").append(value)
    if ledger.protected_tokens is None or ledger.private_tokens is None:
        text.append(
            f"\nprotected / private split and tail waste: {fmt.unobservable(snapshot)}", style="dim"
        )
    _other_samples(text, snapshot)
    return text


def _other_samples(text: Text, snapshot: Snapshot) -> None:
    """With the plugin the rows above are its one sample; SGLang's own gauges (they lag:
    refreshed per logged batch) and each DP rank's sample follow, labelled."""
    server = snapshot.server_ledger
    if server is not None:
        text.append(f"\nSGLang /metrics (lags): free {server.free_tokens:,}  evictable "
                    f"{server.evictable_tokens:,}  used {server.used_tokens:,}", style="dim")
    for rank, led in enumerate(snapshot.rank_ledgers):
        text.append(f"\nDP rank {rank}: free {led.free_tokens:,}  evictable "
                    f"{led.evictable_tokens:,}  protected {_count(led.protected_tokens)}  "
                    f"private {_count(led.private_tokens)}  of {led.pool_tokens:,}",
                    style="dim")


def _count(tokens: int | None) -> str:
    return fmt.DASH if tokens is None else f"{tokens:,}"


class LedgerTable(SnapshotStatic):
    def render_snapshot(self, snapshot: Snapshot) -> Text:
        return ledger_text(snapshot)

"""The top line: what is being watched, the modeled clock, and whether it is live.

When label, clock, state and engine do not fit the terminal's width on one line, the engine
part moves to a second line, so nothing is cut on a 160-column terminal and at 80 columns
only an over-long engine description (a long model path) is ellipsized.

Only snapshot fields and the run state appear here, no wall-clock text, so a paused run
renders the same every time (the snapshot tests rely on it).
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from engine_adapter.snapshot import Snapshot
from kvctl.tui import format as fmt
from kvctl.tui.widgets.common.snapshot_widgets import SnapshotStatic

RUN_STATES = {
    "starting": ("◌ starting the engine (SGLang import: seconds)", "yellow"),
    "first-read": ("◌ waiting for the first read", "yellow"),
    "live": ("● live", "bold green"),
    "paused": ("❚❚ paused", "bold yellow"),
    "finished": ("■ workload finished", "bold cyan"),
    "read-only": ("● live, read-only", "bold green"),
    "failed": ("✖ failed", "bold red"),
    "disconnected": ("✖ disconnected", "bold red"),
}


def status_text(
    snapshot: Snapshot | None, *, label: str, run_state: str, width: int | None = None
) -> Text:
    """Label │ clock │ run state │ engine; with `width`, the engine wraps to a second line
    rather than being cut (each line then truncates with an ellipsis only if still too long)."""
    text = Text.assemble((" kvctl monitor ", "bold reverse"), " ", (label, "bold"))
    engine = ""
    if snapshot is not None:
        info = snapshot.info
        if info.engine.startswith("remote"):  # remote, or remote+plugin: no modeled clock
            clock = f"attached {snapshot.virtual_time_s:.1f} s · read {snapshot.seq:,}"
        else:
            steps = snapshot.counters.steps
            clock = f"t {snapshot.virtual_time_s:.2f} s modeled" + (
                f" · step {steps:,}" if steps is not None else ""
            )
        text.append(" │ ", style="dim").append(clock)
        if not snapshot.connected:
            run_state = "disconnected"
        engine = (
            f"{info.engine} · {info.tree_core} core · {info.eviction_policy} · page "
            f"{info.page_size} · SGLang {info.sglang_version}"
        )
        if info.model:
            engine += f" · {info.model}"
    words, style = RUN_STATES.get(run_state, ("✖ disconnected, last good numbers", "bold red"))
    text.append(" │ ", style="dim").append(words, style=style)
    if engine:
        one_line = len(text.plain) + 3 + len(engine)
        if width is None or one_line <= width:
            text.append(" │ ", style="dim").append(engine, style="dim")
        else:
            text.append("\n ").append(engine, style="dim")
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


class StatusBar(SnapshotStatic):
    DEFAULT_CSS = "StatusBar { height: auto; max-height: 2; background: $panel; }"
    run_state: reactive[str] = reactive("starting", repaint=False)

    def __init__(self, label: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.label = label

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        self._show(snapshot, self.run_state)

    def watch_run_state(self, run_state: str) -> None:
        self._show(self.snapshot, run_state)

    def on_resize(self) -> None:
        self._show(self.snapshot, self.run_state)

    def _show(self, snapshot: Snapshot | None, run_state: str) -> None:
        width = self.size.width or None
        text = status_text(snapshot, label=self.label, run_state=run_state, width=width)
        # a change between one and two lines needs a layout pass; same height does not
        lines = text.plain.count("\n") + 1
        self.update(text, layout=lines != self.size.height)

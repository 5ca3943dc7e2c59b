"""What the replay commands share: `kvctl replay` (replay.py), its --curve
(replay_curve.py) and --against (twin.py) modes, and `kvctl plan --validate`
(plan_recommend.py) import it; it imports none of them, so imports point one way."""

from __future__ import annotations


class ProgressBar:
    """A Rich progress bar on stderr when it is a TTY (never under --json); a no-op
    elsewhere. On stderr, not stdout: stdout carries the report, and a replay points fd 1 at
    stderr for its whole loop (kvctl.replay.runner.run). Use as a context manager; `replay`
    takes the runner's Progress, `runs_done` a sweep's count."""

    def __init__(self, wanted: bool, description: str, total: int | None = None) -> None:
        from rich.console import Console

        self._console = Console(stderr=True)
        self.enabled = wanted and self._console.is_terminal
        self.description = description
        self.total = total
        self.bar = None
        self.task = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn)

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20),
                                MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                                TimeElapsedColumn(), console=self._console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.description, total=self.total, detail="")
        return self

    def replay(self, progress) -> None:
        if self.bar is not None:
            detail = f"requests  t={progress.virtual_time_s:,.1f}s  hit {progress.hit_rate:.1%}"
            self.bar.update(self.task, total=progress.requests_total,
                            completed=progress.requests_done, detail=detail)

    def runs_done(self, count: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=count)

    def runs_state(self, state) -> None:
        """A Ray sweep's SweepProgress: done and failed complete the bar; running is shown."""
        if self.bar is not None:
            self.bar.update(self.task, completed=state.done + state.failed,
                            detail=f"{state.running} running, {state.failed} failed")

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def fmt_seconds(value) -> str:
    """A latency: milliseconds under 1 s, seconds above; `-` when unknown."""
    if value is None:
        return "-"
    return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"

"""`MonitorApp` and `make_app()`: the source, the polling worker and the operator's keys.

    app = make_app(source_or_factory, refresh_s=0.5, label="coding-agents.yaml")
    app.run()

`source` is a SnapshotSource (the caller owns and closes it) or a zero-argument factory
that builds one (built in a worker thread so the UI appears at once; the app closes it on
exit). Every `refresh_s` a thread worker reads `source.snapshot()`, indexes a new per-node
tree read there (tree_index.index_for: the costly step, kept off the UI thread), and
publishes the snapshot to the dashboard's reactive; one already shown is not re-published.
Once shown, the worker holds the read it published, so the read before is freed on its
thread, not the UI's (`release_old_read`).
Failures reach the operator through `notify(severity="error")`, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding

from engine_adapter.snapshot import Snapshot
from kvctl.errors import InputError
from kvctl.tui import source_control as control
from kvctl.tui.messages import SourceFailed
from kvctl.tui.screens.flush_confirm import FlushConfirmScreen
from kvctl.tui.screens.help import HelpScreen
from kvctl.tui.screens.monitor import MonitorScreen
from kvctl.tui.tree_index import index_for

DEFAULT_REFRESH_S = 0.5


class MonitorApp(App[None]):
    CSS_PATH = Path(__file__).with_name("kvctl.tcss")
    TITLE = "kvctl monitor"
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("p", "toggle_pause", "Pause/resume"),
        Binding("s", "step", "Step", show=False),
        Binding("f", "flush", "Flush cache"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, source: control.SourceOrFactory, *, refresh_s: float, label: str) -> None:
        super().__init__()
        self.refresh_s = refresh_s
        self.monitor = MonitorScreen(label)
        self.source = source if control.is_source(source) else None
        self._factory = None if self.source is not None else source
        self.owns_source = self._factory is not None
        self.failure: str | None = None
        self._last: Snapshot | None = None
        self._last_good_seq: int | None = None  # the last connected read, for the banner
        self._paused = False
        self._error_reported: str | None = None
        self._published_read = None  # the polling worker's reference: see release_old_read

    # ---- lifecycle -------------------------------------------------------------------------

    def on_mount(self) -> None:
        self.push_screen(self.monitor)
        if self.source is None:
            self._build_source()
        else:
            self._source_ready()

    @work(thread=True, exclusive=True, group="source", exit_on_error=False)
    def _build_source(self) -> None:
        try:
            source = self._factory()
        except Exception as err:  # a bad scenario, SGLang missing: shown, not raised
            self.post_message(SourceFailed(error=_one_line(err)))
            return
        self.call_from_thread(self._adopt, source)

    def _adopt(self, source) -> None:
        self.source = source
        self._source_ready()

    def _source_ready(self) -> None:
        # not "live" yet: the state follows the first read, when `publish` shows it
        self.monitor.run_state = "first-read"
        self._poll()
        # A live run replaces its snapshot every interval and only some carry a per-node
        # tree read; reading twice per interval sees each of them (a repeat is skipped).
        # A read-only (remote) source does real I/O per read: once per interval.
        every = self.refresh_s if control.is_read_only(self.source) else self.refresh_s / 2
        self.set_interval(every, self._poll)

    def on_source_failed(self, message: SourceFailed) -> None:
        if message.error == self.failure:
            return  # every poll of a dead source fails the same way: say it once
        self.failure = message.error
        self.monitor.run_state = "failed"
        self.notify(message.error, title="snapshot source failed", severity="error", timeout=30)

    def on_unmount(self) -> None:
        if self.owns_source and self.source is not None:
            self.source.close()

    # ---- reads -------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _poll(self) -> None:
        source = self.source
        try:
            snapshot = source.snapshot()
            if snapshot.refs.per_node and snapshot is not self._last:
                index_for(
                    snapshot.tree_nodes
                )  # the costly part of a tree refresh, off the UI thread
        except Exception as err:  # a dead worker thread, a remote hiccup
            self.post_message(SourceFailed(error=_one_line(err)))
            return
        self.call_from_thread(self.publish, snapshot)  # returns once the UI has shown it
        self.release_old_read(snapshot)

    def release_old_read(self, published: Snapshot) -> None:
        """Called by the polling worker once `published` is on screen: hold its per-node
        read, dropping the one published before. The UI let go of that one when it showed
        the new read, so its columns (~300k Python ints for 100k nodes, ~3 ms to free) are
        freed here, on the worker thread, instead of in the middle of a UI refresh. A read
        the UI still shows (after a snapshot without one) stays alive through its widgets."""
        if published.refs.per_node:
            self._published_read = published.tree_nodes

    def read_now(self) -> None:
        """Read the source on the UI thread and publish (after an action; tests)."""
        if self.source is not None:
            self.publish(self.source.snapshot())

    def publish(self, snapshot: Snapshot) -> None:
        """Show `snapshot` unless it is the one on screen already.

        A disconnected snapshot raises the banner; its numbers are drawn (greyed, as stale)
        only when they are a previous good read, never when the source never answered.
        """
        self._report_source_error()
        self._update_run_state()
        if snapshot.connected:
            self._last_good_seq = snapshot.seq
        else:
            self.monitor.run_state = "disconnected"
        self.monitor.show_source_state(snapshot, last_good_seq=self._last_good_seq)
        if not snapshot.connected and self._last_good_seq is None:
            return  # a placeholder: nothing to show yet
        last = self._last
        if last is not None and (snapshot is last or snapshot.seq == last.seq):
            return
        self._last = snapshot
        self.monitor.snapshot = snapshot

    def _report_source_error(self) -> None:
        error = getattr(self.source, "error", None)
        if error and error != self._error_reported:
            self._error_reported = error
            self.notify(error, title="the workload stopped", severity="error", timeout=30)

    def _update_run_state(self) -> None:
        if self.source is not None:
            self.monitor.run_state = control.run_state(self.source, paused=self._paused)

    # ---- keys --------------------------------------------------------------------------------

    def _refuse_read_only(self, what: str) -> bool:
        if self.source is None:
            self.notify("the source is still starting", severity="warning")
            return True
        if control.is_read_only(self.source):
            self.notify(
                f"{what}: this source is read-only (remote); embedded only", severity="warning"
            )
            return True
        return False

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_toggle_pause(self) -> None:
        if self._refuse_read_only("cannot pause"):
            return
        paused = getattr(self.source, "paused", self._paused)
        if paused:
            self.source.resume()
        else:
            self.source.pause()
        self._paused = not paused
        self._update_run_state()
        self.notify("workload resumed" if paused else "workload paused", timeout=2)

    def action_step(self) -> None:
        if self._refuse_read_only("cannot step"):
            return
        if not control.can_step(self.source) or not getattr(self.source, "paused", self._paused):
            self.notify("step works on a paused embedded run (press p first)", severity="warning")
            return
        self.source.step_once()
        self.read_now()

    def action_flush(self) -> None:
        if self._refuse_read_only("cannot flush"):
            return
        evictable = self._last.ledger.evictable_tokens if self._last is not None else 0
        self.push_screen(FlushConfirmScreen(evictable), callback=self._flush_answered)

    def _flush_answered(self, confirmed: bool | None) -> None:
        if not confirmed:
            self.notify("flush cancelled", timeout=2)
            return
        try:
            evicted = self.source.flush_cache()
        except Exception as err:
            self.notify(_one_line(err), title="flush failed", severity="error")
            return
        detail = f": {evicted:,} tokens evicted" if isinstance(evicted, int) else ""
        self.notify(f"cache flushed{detail}", timeout=4)
        self.read_now()


def make_app(
    source: control.SourceOrFactory, *, refresh_s: float = DEFAULT_REFRESH_S, label: str = ""
) -> MonitorApp:
    """The monitor app for a snapshot source or a factory of one (CLI and tests share this)."""
    if refresh_s <= 0:
        raise InputError(f"--refresh {refresh_s} must be > 0 seconds")
    return MonitorApp(source, refresh_s=refresh_s, label=label or "live KV cache")


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")

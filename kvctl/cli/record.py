"""Record a live SGLang server's traffic as a Mooncake trace (salted block hashes, no token ids).

`kvctl record --url URL --out trace.jsonl` checks the destination, finds the server's kvctl
plugin (via /server_info or --plugin-url), proves recording is on with the expected block
size, then polls `/records` until --duration, --max-requests or Ctrl-C. A Rich line on a
TTY shows requests, prompt tokens, distinct blocks and drops as they come. On exit the trace
and its `.meta.json` sidecar are written atomically (kvctl/record/writer.py), the server's
timed scheduler steps as `.steps.json` (kvctl/record/steps.py, for kvctl calibrate). Exit 2 for
everything that fails before recording (naming the fix), 1 when the plugin was lost or
nothing finished (what was received is still written).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.errors import InputError, RuntimeFailure
from kvctl.cli.plugin_options import PluginToken

Opt = typer.Option
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def record_command(
    url: Annotated[str, Opt(help="The SGLang server, http://HOST:PORT.")],
    out: Annotated[Path, Opt(help="Mooncake JSONL to write (its sidecar: NAME.meta.json).")],
    plugin_url: Annotated[Optional[str], Opt(help=(
        "The kvctl plugin's endpoint (default: what /server_info advertises)."))] = None,
    plugin_token: PluginToken = None,
    duration: Annotated[Optional[str], Opt(help="Stop after this long: 90s, 10m, 1h.")] = None,
    max_requests: Annotated[Optional[int], Opt(help="Stop after N finished requests.")] = None,
    block_tokens: Annotated[Optional[int], Opt(help=(
        "Tokens per hash block (default: the server's, its page size unless "
        "KVCTL_RECORD_BLOCK_TOKENS says otherwise); a multiple of it. 512: Mooncake's."))
    ] = None,
    interval: Annotated[float, Opt(help="Seconds between polls.")] = 0.5,
    json_output: Annotated[bool, Opt("--json", help=(
        "Print the sidecar as JSON at the end."))] = False,
) -> None:
    """Validate, connect, record, write; see the module docstring."""
    from kvctl.record.client import connect
    from kvctl.record.session import RecordingSession
    from kvctl.record.steps import StepTap
    from kvctl.record.writer import check_destination

    duration_s = parse_duration(duration) if duration is not None else None
    if max_requests is not None and max_requests <= 0:
        raise InputError(f"--max-requests must be positive, got {max_requests}")
    if block_tokens is not None and block_tokens <= 0:
        raise InputError(f"--block-tokens must be positive, got {block_tokens}")
    if interval <= 0:
        raise InputError(f"--interval must be > 0 seconds, got {interval}")
    check_destination(out)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    target, client, first = connect(url, plugin_url=plugin_url, token=plugin_token,
                                    block_tokens=block_tokens)
    session = RecordingSession(client, first, duration_s=duration_s, max_requests=max_requests,
                               interval_s=interval)
    steps = StepTap.start(target.plugin_url, plugin_token)
    with LiveLine(not json_output, duration_s=duration_s, max_requests=max_requests) as line:
        session.run(on_progress=steps.wrap(line.update))
    _finish(session, target, out, started_at, json_output, steps)


def _finish(session, target, out: Path, started_at: str, json_output: bool,
            steps=None) -> None:
    from kvctl.cli.output import console, print_json
    from kvctl.record.writer import meta_path, write_recording
    from kvctl.replay.mooncake import BLOCK_TOKENS as MOONCAKE_BLOCK_TOKENS

    progress = session.progress()
    if not session.records:
        why = f" ({session.lost})" if session.lost else ""
        raise RuntimeFailure(f"no request finished while recording{why}; nothing written")
    block_tokens = target.block_tokens
    meta = {
        "block_tokens": block_tokens,
        "server_block_tokens": target.server_block_tokens,
        "dropped": session.dropped,
        "model": target.model,
        "page_size": target.page_size,
        "server_url": target.server_url,
        "plugin_url": target.plugin_url,
        "sglang_version": target.version,
        "dp_size": target.dp_size,
        "recorded_dp_ranks": "the plugin endpoint's rank only" if target.dp_size > 1 else "all",
        "started_at": started_at,
        "recorded_seconds": round(progress.elapsed_s, 3),
        "in_flight_at_stop": session.in_flight,
        "server_restarts": session.restarts,
        "hook_errors": session.hook_errors,
        "stopped_by": ("lost plugin" if session.lost else "ctrl-c" if session.interrupted
                       else "max-requests" if session.reached_max else "duration"),
        "hashing": "BLAKE2b-64, chained per block, keyed by a per-recording salt never written",
    }
    document = write_recording(out, session.records, meta)
    if steps is not None:
        written = steps.write_next_to(out)
        document["step_samples"] = len(steps.samples) if written else steps.note
    session.release()
    if json_output:
        print_json({"out": str(out), **document})
    else:
        console().print(
            f"recorded {document['requests']:,} requests, {progress.prompt_tokens:,} prompt "
            f"tokens, {document['distinct_blocks']:,} distinct blocks, {session.dropped:,} "
            f"dropped -> {out} (+ {meta_path(out).name}); no token ids stored")
    if block_tokens != MOONCAKE_BLOCK_TOKENS:
        typer.echo(f"kvctl: note: {block_tokens}-token blocks (kvctl replay reads the size from "
                   f"{meta_path(out).name}); Mooncake's own tools expect "
                   f"{MOONCAKE_BLOCK_TOKENS}: record with --block-tokens "
                   f"{MOONCAKE_BLOCK_TOKENS} for them", err=True)
    if session.lost:
        raise RuntimeFailure(f"recording stopped early: {session.lost}; wrote what was received "
                             f"to {out}")


def parse_duration(text: str) -> float:
    """`90`, `90s`, `10m`, `1.5h`, `500ms` to seconds; InputError otherwise."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise InputError(f"--duration {text!r} is not a positive duration such as 90s, 10m or 1h")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


class LiveLine:
    """A Rich progress line on a TTY (never under --json); a no-op elsewhere."""

    def __init__(self, wanted: bool, *, duration_s: float | None,
                 max_requests: int | None) -> None:
        from kvctl.cli.output import console

        self.enabled = wanted and console().is_terminal
        self._duration_s, self._max = duration_s, max_requests
        self._bar = self._task = None

    def __enter__(self) -> LiveLine:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            from kvctl.cli.output import console

            total = self._max if self._max is not None else self._duration_s
            self._bar = Progress(TextColumn("recording"), BarColumn(bar_width=16),
                                 TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                                 console=console(), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("record", total=total, detail="connected")
        return self

    def update(self, progress) -> None:
        if self._bar is None:
            return
        detail = (f"{progress.requests:,} requests  {progress.prompt_tokens:,} tokens  "
                  f"{progress.distinct_blocks:,} blocks  {progress.dropped:,} dropped  "
                  f"{progress.in_flight:,} in flight")
        if progress.unreachable:
            detail += "  [yellow]plugin not answering[/]"
        done = progress.requests if self._max is not None else progress.elapsed_s
        self._bar.update(self._task, completed=done, detail=detail)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


"""Fit a step-cost model to a live SGLang server's measured scheduler steps (kvctl's plugin).

`kvctl calibrate --url URL --out server-cost.json` finds the server's kvctl plugin, reads its
timed steps (`/step_samples`) while the server runs traffic (calibrate sends none), until
--duration or --samples, fits the model by non-negative least squares on relative error
(kvctl/calibrate/fit.py), prints the fit's quality and writes the model atomically
(kvctl/calibrate/model_file.py). `kvctl replay --cost-model server-cost.json` then uses it as
the replay's clock. `--from NAME.steps.json` fits the steps `kvctl record` kept instead.
Exit 2 before collecting (no server, no plugin, a bad option) and when the samples cannot
determine a model; 1 when the plugin stops answering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvctl.cli.plugin_options import PluginToken
from kvctl.errors import InputError

Opt = typer.Option


def calibrate_command(
    url: Annotated[Optional[str], Opt(help="The SGLang server, http://HOST:PORT.")] = None,
    out_file: Annotated[Optional[Path], Opt("--out", help=(
        "The model file to write (JSON; an existing one is replaced atomically)."))] = None,
    from_file: Annotated[Optional[Path], Opt("--from", help=(
        "Fit the steps a recording kept (NAME.steps.json from kvctl record) instead of "
        "reading a live server."))] = None,
    plugin_url: Annotated[Optional[str], Opt(help=(
        "The kvctl plugin's endpoint (default: what /server_info advertises)."))] = None,
    plugin_token: PluginToken = None,
    duration: Annotated[Optional[str], Opt(help=(
        "Collect for this long: 90s, 10m (default 60s unless --samples is given)."))] = None,
    samples: Annotated[Optional[int], Opt(help="Stop after N step samples.")] = None,
    history: Annotated[bool, Opt(help=(
        "Also use the steps the plugin still holds from before this run (up to 8,192)."))
    ] = False,
    interval: Annotated[float, Opt(help="Seconds between polls.")] = 1.0,
    json_output: Annotated[bool, Opt("--json", help="Print the model document as JSON.")] = False,
) -> None:
    """Validate, collect, fit, write; see the module docstring."""
    from kvctl.calibrate.collect import SampleCollector, find_plugin
    from kvctl.calibrate.fit import fit_from_samples
    from kvctl.calibrate.model_file import write_model
    from kvctl.cli.record import parse_duration
    from kvctl.record.writer import check_destination

    if out_file is None:
        raise InputError("give --out FILE, the model file to write")
    if (url is None) == (from_file is None):
        raise InputError("give exactly one of --url (a live server) and --from (a recording's "
                         ".steps.json)")
    if samples is not None and samples <= 0:
        raise InputError(f"--samples must be positive, got {samples}")
    if interval <= 0:
        raise InputError(f"--interval must be > 0 seconds, got {interval}")
    duration_s = parse_duration(duration) if duration is not None else (
        None if samples is not None else 60.0)
    out = check_destination(out_file)  # a file, replaced atomically (not an --out folder)
    if from_file is not None:
        from kvctl.record.steps import load_steps

        steps = load_steps(from_file)[:samples]
        model = fit_from_samples(steps, source=out.name)
        server = {"url": None, "from": str(from_file), "lost_samples": 0, "restarts": 0}
    else:
        target = find_plugin(url, plugin_url=plugin_url)
        collector = SampleCollector(target.plugin_url, token=plugin_token, history=history)
        with _Progress(not json_output, duration_s, samples) as bar:
            collector.run(duration_s=duration_s, max_samples=samples, interval_s=interval,
                          on_progress=bar.update)
        model = fit_from_samples(collector.samples, source=out.name)
        server = {"url": target.server_url, "plugin_url": target.plugin_url,
                  "model": target.model, "page_size": target.page_size,
                  "sglang_version": target.version, "lost_samples": collector.lost,
                  "restarts": collector.restarts}
    document = write_model(out, model, server=server)
    if json_output:
        from kvctl.cli.output import print_json

        print_json({"out": str(out), **document})
    else:
        from kvctl.cli.output import console

        console().print(render_fit(document, out))


def render_fit(doc: dict, out: Path) -> str:
    """The people's summary: samples per step kind, fit quality, coefficients."""
    fit, coefficients, units = doc["fit"], doc["coefficients"], doc["units"]
    kinds = ", ".join(f"{n:,} {k}" for k, n in fit["by_kind"].items())
    per_kind = ", ".join(f"{k} {e:.1%}" for k, e in fit["median_rel_error_by_kind"].items())
    where = doc["server"]["url"] or doc["server"]["from"]
    lines = [f"kvctl calibrate: {fit['samples']:,} steps ({kinds}) from {where}",
             f"fit: R^2 {fit['r2']:.3f}   relative error median {fit['median_rel_error']:.1%}, "
             f"p90 {fit['p90_rel_error']:.1%}   (median by kind: {per_kind})",
             *_time_line(fit),
             "coefficients (non-negative least squares on relative error, time conserved):"]
    lines += [f"  {term:<26} {value:.4g} {units[term]}" for term, value in coefficients.items()]
    if doc["server"]["lost_samples"]:
        lines.append(f"note: {doc['server']['lost_samples']:,} samples were lost between polls "
                     "(poll more often: --interval)")
    lines.append(f"wrote {out}; use it with: kvctl replay TRACE --cost-model {out}")
    return "\n".join(lines)


def _time_line(fit: dict) -> list[str]:
    """The fit's step time against the measured (kvctl/calibrate/fit.py conserves it per part:
    steps with prefill work, decode-only steps); nothing for a file written before."""
    if not fit.get("measured_s"):
        return []
    return [f"time: the fitted steps sum to {fit['fitted_s']:,.2f} s, measured "
            f"{fit['measured_s']:,.2f} s (conserved for prefill and decode-only steps)"]


class _Progress:
    """A Rich progress line on a TTY (never under --json); a no-op elsewhere."""

    def __init__(self, wanted: bool, duration_s: float | None, samples: int | None) -> None:
        from kvctl.cli.output import console

        self.enabled = wanted and console().is_terminal
        self.by_samples = samples is not None
        self.total = samples if self.by_samples else duration_s
        self._bar = self._task = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            from kvctl.cli.output import console

            self._bar = Progress(TextColumn("calibrating"), BarColumn(bar_width=16),
                                 TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
                                 console=console(), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("calibrate", total=self.total, detail="")
        return self

    def update(self, count: int, elapsed_s: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=count if self.by_samples else elapsed_s,
                             detail=f"{count:,} steps")

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()

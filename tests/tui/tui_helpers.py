"""Builders shared by the monitor's tests (imported as `tui_helpers`, a name no other test
directory uses): a real embedded engine running a shipped scenario in a `LiveRun` that is
paused from the start and advanced by hand, so every snapshot is a deterministic function
of (scenario, seed, steps); and the on-screen text of a widget."""

from __future__ import annotations

from pathlib import Path

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
SIZE = (160, 50)  # the terminal every snapshot test renders at
SALT = "kvctl-tui-tests"


def paused_run(scenario: str = "lifecycle-check", *, steps: int, seed: int = 7):
    """A LiveRun on `examples/scenarios/<scenario>.yaml`, never started, stepped `steps`
    times (each step refreshes the snapshot with a per-node tree read)."""
    from engine_adapter.embedded.engine import EmbeddedEngine
    from engine_adapter.live import LiveRun
    from kvctl.replay.engine_setup import engine_config
    from kvctl.replay.scenario import load_scenario

    path = SCENARIOS / f"{scenario}.yaml"
    defaults = dict(load_scenario(path).engine_defaults)
    pool = defaults.pop("pool_tokens", None)
    # a fixed namespace salt: labels are random per engine otherwise (engine config)
    engine = EmbeddedEngine(engine_config(pool_tokens=pool, namespace_salt=SALT, **defaults))
    run = LiveRun(
        engine,
        lambda i: load_scenario(path, seed=seed + i),
        pace=None,
        loop=True,
        tree_interval_s=1.0,
        start_paused=True,
    )
    for _ in range(steps):
        run.step_once()
    return run


def widget_text(widget) -> str:
    """The text a widget shows on screen now (its rendered lines, styles dropped)."""
    from textual.geometry import Region

    width, height = widget.size
    return "\n".join(strip.text for strip in widget.render_lines(Region(0, 0, width, height)))

"""Scenario files (YAML) that generate agent workloads; see schema.py and driver.py."""

from __future__ import annotations

from pathlib import Path

from kvctl.replay.scenario.driver import ScenarioDriver
from kvctl.replay.scenario.schema import Scenario, parse_scenario

SHIPPED_DIR = Path(__file__).resolve().parents[3] / "examples" / "scenarios"


def read_scenario(path: str | Path) -> Scenario:
    """Parse and validate a scenario file; InputError names the file and the field."""
    from kvctl.util.inputs import load_yaml

    document = load_yaml(path, what="scenario")
    return parse_scenario(document, str(path))


def load_scenario(path: str | Path, *, seed: int | None = None, limit: int | None = None) -> ScenarioDriver:
    """A fresh WorkloadDriver for the scenario file (seed overrides the file's seed)."""
    return ScenarioDriver(read_scenario(path), seed=seed, limit=limit)

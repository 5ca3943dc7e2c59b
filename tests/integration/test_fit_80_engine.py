"""`kvctl replay`, `kvctl check` and `kvctl inspect` read whole on an 80-column terminal.

Real runs (SGLang's radix cache on CPU, a loopback SGLang-shaped server for inspect), then the
same rendering at 400 and at 80 columns: no line over 80 cells, no truncated cell ("…"), no
word of the wide rendering cut or lost (tests/fit80.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fit80 import assert_cli_fits, assert_renderable_fits
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HEAD = str(REPO / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def test_replay_report_fits_80_columns(sglang_ready):
    """The replay report (header, figures, funnel with its rejection buckets, integrity)."""
    from kvctl.cli.replay import render_report

    result = CliRunner().invoke(app, ["replay", HEAD, "--limit", "3", "--json"])
    assert result.exit_code == 0, result.output
    narrow = assert_renderable_fits(render_report(json.loads(result.stdout)))
    assert "lost: unauthorized_namespace" in narrow


def test_replay_sweep_table_fits_80_columns(sglang_ready):
    """The 8-column sweep table splits rather than cutting run names or pool sizes."""
    from kvctl.cli.replay import _sweep_table
    from kvctl.replay import sweep as sweeps
    from kvctl.replay.runner import ReplaySettings

    runs = sweeps.grid(ReplaySettings(workload=HEAD, limit=2),
                       sweeps.parse_sweeps(["eviction=lru,lfu", "page-size=16,64"]))
    rows = sweeps.rank(runs, sweeps.run_sweep(runs, parallel=1))
    narrow = assert_renderable_fits(_sweep_table(rows, "head_500.jsonl"))
    assert "lru / 16" in narrow and "lfu / 64" in narrow


def test_check_fits_80_columns(sglang_ready):
    """`kvctl check --steps 40` (the shipped lifecycle scenario) at 80 columns."""
    narrow = assert_cli_fits(app, "check", "--steps", "40")
    assert "max |pool ledger residual| (tokens)" in narrow


def test_inspect_with_a_route_fits_80_columns(loopback_demo_url, tmp_path):
    """`kvctl inspect --url U --prompt-file P`: the worker table and the routing table.
    The loopback SGLang runs in a process of its own (tests/remote_relay.py): this process's
    one metrics-enabled LoopbackServer belongs to test_remote_engine.py."""
    path = tmp_path / "prompt.json"
    path.write_text(json.dumps({"token_ids": list(range(900_001, 900_015))}))
    narrow = assert_cli_fits(app, "inspect", "--url", loopback_demo_url, "--prompt-file", str(path))
    assert "Routing (14 prompt tokens" in narrow

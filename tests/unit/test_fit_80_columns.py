"""`kvctl size` and every `kvctl plan` command read whole on an 80-column terminal.

Each test renders the command twice through the real CLI (CliRunner, a 400- and an
80-column terminal) and requires that at 80 columns no line is longer than 80 cells, no
cell is truncated ("…"), and every word of the wide rendering is still there whole
(tests/fit80.py). The wide tables split by columns rather than shrink (kvctl/cli/fit_table.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fit80 import assert_cli_fits, assert_renderable_fits

from kvctl.cli.app import app

pytestmark = pytest.mark.unit

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"


@pytest.mark.parametrize("args", [
    ("--model", "Llama-3.1-70B", "--gpus", "8", "--tp", "8", "--context", "8192,32768,131072"),
    ("--model", "Mistral-7B", "--context", "32768", "--mean-length", "2048", "--batch", "256"),
    ("--model", "DeepSeek-V3", "--gpu", "H200", "--gpus", "8", "--tp", "8", "--hbm-gb", "141GiB"),
    ("--model", "Llama-3.1-405B", "--context", "8192"),
    ("--model", str(CONFIGS / "deepseek-v2-lite"), "--context", "4k,32k", "--mem-fraction", "0.9"),
], ids=["70b-tp8", "sliding-static-batch", "mla-custom-hbm", "does-not-fit", "config-mem-fraction"])
def test_size_fits_80_columns(args):
    """kvctl size: summary, context table, static table, verdict and assumptions at 80 columns."""
    assert_cli_fits(app, "size", *args)


PLANS = {
    "capacity": ("plan", "capacity", "--model", "Llama-3.1-70B", "--gpus", "8", "--tp", "8",
                 "--context", "32768", "--output", "2048", "--shared-tokens", "24576",
                 "--trajectories", "100", "--branches", "4", "--arrival-rate", "2"),
    "retention": ("plan", "retention", "--model", "Llama-3.1-70B", "--context", "32768", "--tp", "8",
                  "--params-b", "70.6", "--prefill-tflops", "3560", "--link-gbps", "64",
                  "--tool", "lint=0.02", "--tool", "integration-suite=45",
                  "--tool", "human-approval=600:120"),
    "chunked-prefill": ("plan", "chunked-prefill", "--params-b", "70", "--weights-gb", "140",
                        "--peak-tflops", "800", "--hbm-tbps", "3", "--decode-batch", "32",
                        "--prompt", "4096", "--chunk", "512"),
    "block-size": ("plan", "block-size", "--lengths", "33,25,16", "--row-bytes", "64KiB",
                   "--pool-slots", "128", "--kernel-lengths", "64,63,17,1"),
    "cow": ("plan", "cow", "--offset", "34", "--block-size", "16", "--row-bytes", "48KiB",
            "--row-bytes", "16KiB"),
    "vmm": ("plan", "vmm", "--model", "Llama-3-8B", "--page-group", "64KiB,2MiB",
            "--lengths", "1024,1025"),
    "shared-prefix": ("plan", "shared-prefix", "--prefix", "64", "--suffixes", "8,8,8,8,16,16,16,16",
                      "--kv-row-bytes", "512", "--value-dim", "128", "--chunk-sizes", "16,32,64"),
    "recommend": ("plan", "recommend", "--model", "Llama-3.1-70B", "--gpus", "8", "--tp", "8",
                  "--context", "32768", "--output", "2048", "--shared-tokens", "24576",
                  "--tool-wait-seconds", "45", "--host-gb", "256"),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_plan_fits_80_columns(name):
    """Every `kvctl plan` sub-command, with its docs/plan.md example, reads whole at 80 columns."""
    assert_cli_fits(app, *PLANS[name])


def test_a_too_wide_table_splits_and_keeps_every_cell():
    """A 9-column table of 9-digit numbers is split into parts that repeat the key column;
    every number appears whole at 80 columns."""
    from kvctl.cli.fit_table import FitTable

    table = FitTable(title="wide")
    for name in ["key", *(f"column {i}" for i in range(8))]:
        table.add_column(name, no_wrap=True)
    table.add_row("row", *(f"{123_456_789 + i:,}" for i in range(8)))
    narrow = assert_renderable_fits(table)
    assert "wide (continued)" in narrow
    assert narrow.count("row") >= 2

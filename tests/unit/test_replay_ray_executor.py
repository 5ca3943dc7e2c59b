"""The Ray executor's pieces that need no cluster: memory estimate, address checks, failed
runs in the ranking and the table, option errors, and that nothing else imports Ray."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvctl.cli.app import app
from kvctl.errors import InputError
from kvctl.replay.ray_executor import probe, task_memory_bytes
from kvctl.replay.sweep import SweepRow, ranked

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
HEAD = str(REPO / "examples" / "traces" / "mooncake" / "head_500.jsonl")


def test_task_memory_is_base_plus_64_bytes_per_pool_token():
    """1.5 GiB for the process plus 64 B per pool token: 400,000 tokens -> 1,636,040,704 B."""
    assert task_memory_bytes(400_000) == 1_610_612_736 + 25_600_000


@pytest.mark.parametrize("address", ["nohost", "host:", ":6379", "host:port", "host:70000"])
def test_malformed_ray_address_is_rejected(address):
    """An address that is neither auto, HOST:PORT nor ray://HOST:PORT: InputError saying so."""
    with pytest.raises(InputError, match="expected auto, HOST:PORT or ray://HOST:PORT"):
        probe(address)


def test_refused_ray_address_names_host_and_port():
    """A ray:// address on a loopback port where nothing listens: refused, in one line."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(InputError) as err:
        probe(f"ray://127.0.0.1:{port}")
    assert str(err.value) == (f"--ray-address ray://127.0.0.1:{port}: no Ray cluster answers "
                              f"at 127.0.0.1:{port} (Connection refused)")


def _row(label: str, hit: float | None, **marks) -> SweepRow:
    return SweepRow(rank=0, label=label, params=dict(p.split("=") for p in label.split()),
                    pool_tokens=40000, hit_rate=hit, evictions=None if hit is None else 3,
                    evicted_tokens=None if hit is None else 300,
                    retractions=None if hit is None else 0, ttft_p99_s=None,
                    peak_kv_utilization=None if hit is None else 0.5, **marks)


def test_failed_runs_rank_last():
    """A run without a result ranks below every run with one, whatever its label."""
    rows = ranked([_row("eviction=aaa", None, attempts=2, failure="worker node lost"),
                   _row("eviction=lru", 0.2), _row("eviction=lfu", 0.4)])
    assert [(r.rank, r.label) for r in rows] == [
        (1, "eviction=lfu"), (2, "eviction=lru"), (3, "eviction=aaa")]


def test_table_marks_retried_and_failed_runs():
    """The note column appears only when a run was retried or failed, and says why."""
    from kvctl.cli.replay import _sweep_table

    def render(rows) -> str:
        console = Console(width=220, record=True, file=io.StringIO())
        console.print(_sweep_table(ranked(rows), "t.jsonl"))
        return console.export_text()

    clean = render([_row("eviction=lru", 0.2), _row("eviction=lfu", 0.4)])
    assert "note" not in clean
    text = render([_row("eviction=lru", 0.2, attempts=2, retried_after="worker process lost"),
                   _row("eviction=lfu", None, attempts=2, retried_after="worker node lost",
                        failure="out of memory: Ray's memory monitor killed the worker")])
    lines = {line.split()[1]: line for line in text.splitlines() if line.split()[:1] in (["1"], ["2"])}
    assert "retried after: worker process lost" in lines["lru"]
    assert ("-" in lines["lfu"].split() and "failed after 2 attempt(s): out of memory: Ray's "
            "memory monitor killed the worker" in lines["lfu"])


@pytest.mark.parametrize(("args", "message"), [
    (["--executor", "dask", "--sweep", "eviction=lru"], "--executor 'dask': expected local or ray"),
    (["--executor", "ray"], "--executor ray runs sweeps: give --sweep KEY=V1,V2"),
    (["--ray-address", "auto", "--sweep", "eviction=lru"], "--ray-address needs --executor ray"),
])
def test_executor_option_errors_exit_2(args, message):
    """Contradictory executor options: one line, exit 2, before anything is read or run."""
    result = CliRunner().invoke(app, ["replay", HEAD, *args])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"kvctl: error: {message}"


def test_local_commands_never_import_ray():
    """`kvctl size` and `kvctl replay --help` load no Ray module (only --executor ray does)."""
    for args in (["size", "--model", "Llama-3-8B", "--gpu", "H100-SXM", "--json"],
                 ["replay", "--help"]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvctl", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                   if line.startswith("import time:") and "|" in line}
        assert "kvctl.cli.app" in modules
        assert sorted(m for m in modules if m.split(".")[0] == "ray") == []

"""A fleet of two loopback SGLang workers in their own processes, and cache-aware routing.

Each worker is `python -m engine_adapter.remote.loopback_demo`: a real UnifiedRadixCache,
ZmqEventPublisher and SGLang metrics collectors in a separate process (so each has its own
Prometheus registry, as real servers do). Worker A serves a workload whose next turn is
written to a prompt file; worker B serves a different workload (another seed).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvctl.cli.app import app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "tiny_llama"
PAGE = 4


def start_worker(tmp: Path, name: str, seed: int) -> tuple[subprocess.Popen, Path, Path]:
    ready, prompt = tmp / f"{name}.url", tmp / f"{name}.prompt.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine_adapter.remote.loopback_demo",
            "--page-size",
            str(PAGE),
            "--pool-tokens",
            "512",
            "--seed",
            str(seed),
            "--model-dir",
            str(TINY),
            "--ready-file",
            str(ready),
            "--prompt-out",
            str(prompt),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, ready, prompt


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Two workers, started together (each imports SGLang, ~10 s); stopped at module end."""
    tmp = tmp_path_factory.mktemp("fleet")
    started = [start_worker(tmp, "a", seed=1), start_worker(tmp, "b", seed=2)]
    try:
        deadline = time.monotonic() + 180
        while not all(ready.exists() and ready.read_text() for _, ready, _ in started):
            assert all(proc.poll() is None for proc, _, _ in started), "a worker exited"
            assert time.monotonic() < deadline, "workers did not come up"
            time.sleep(0.2)
        yield [(ready.read_text(), prompt) for _, ready, prompt in started]
    finally:
        for proc, _, _ in started:
            proc.terminate()
        for proc, _, _ in started:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def inspect_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["inspect", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_route_picks_the_worker_holding_the_prefix(workers):
    """The next turn of A's conversation: A holds its 64-token prefix (16 pages) of 68
    tokens, B holds none; with no load anywhere the score is mu * 64/68 and A wins."""
    (url_a, prompt_a), (url_b, _) = workers
    document = inspect_json("--url", url_a, "--url", url_b, "--prompt-file", str(prompt_a))
    route = document["route"]
    assert route["winner"] == url_a
    assert [(s["name"], s["matched_tokens"]) for s in route["scores"]] == [(url_a, 64), (url_b, 0)]
    assert (route["prompt_tokens"], route["novel_suffix_tokens"], route["skipped_pages"]) == (
        68,
        4,
        16,
    )
    assert route["scores"][0]["score"] == pytest.approx(0.5 * 64 / 68)


def test_fleet_aggregate_sums_the_workers(workers):
    """Per-worker ledgers sum into the aggregate (two 512-token pools)."""
    (url_a, _), (url_b, _) = workers
    document = inspect_json("--url", url_a, "--url", url_b)
    pools = [w["snapshot"]["ledger"]["pool_tokens"] for w in document["workers"]]
    evictable = [w["snapshot"]["ledger"]["evictable_tokens"] for w in document["workers"]]
    aggregate = document["aggregate"]["snapshot"]["ledger"]
    assert (pools, aggregate["pool_tokens"]) == ([512, 512], 1024)
    assert aggregate["evictable_tokens"] == sum(evictable)


def test_each_worker_reconciles(workers):
    """Both mirrors sit inside their server's [evictable, evictable + used] band."""
    (url_a, _), (url_b, _) = workers
    document = inspect_json("--url", url_a, "--url", url_b)
    assert [w["reconciliation"]["drift_tokens"] for w in document["workers"]] == [0, 0]


def test_a_dead_worker_is_excluded_not_fatal(workers):
    """One URL answers nothing: the fleet still reads, flags it down and routes around it."""
    (url_a, prompt_a), _ = workers
    dead = f"http://127.0.0.1:{closed_port()}"
    document = inspect_json(
        "--url", url_a, "--url", dead, "--prompt-file", str(prompt_a), "--wait", "1"
    )
    assert [w["connected"] for w in document["workers"]] == [True, False]
    alerts = document["aggregate"]["snapshot"]["alerts"]
    assert [a["name"] for a in alerts] == ["fleet_worker_down"]
    assert (document["route"]["winner"], document["route"]["excluded"]) == (
        url_a,
        [[dead, "disconnected"]],
    )

"""A fleet of two loopback SGLang workers in their own processes, and cache-aware routing.

Each worker is `python -m support.loopback_demo` (tests/support): a real UnifiedRadixCache,
ZmqEventPublisher and SGLang metrics collectors in a separate process (so each has its own
Prometheus registry, as real servers do). Worker A serves a workload whose next turn is
written to a prompt file; worker B serves a different workload (another seed).
"""

from __future__ import annotations

import json
import os
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
            "support.loopback_demo",
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
        env={**os.environ, "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{REPO}"},
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


# What each worker served (loopback_demo.workload, 12 prompts, page 4): a 32-token system
# prompt shared by 3 conversations, each turn adding 8 tokens, 4 turns per conversation, so
# the tree holds 32 + 3 x 32 = 128 tokens (32 pages), nothing running. Prompts are
# 3 x (40 + 48 + 56 + 64) = 624 tokens; cached before each insert: 0 for the very first,
# 32 (the system prompt) for the other two first turns, then the previous turn's length:
# 0 + 32 + 32 + 3 x (40 + 48 + 56) = 496. Output: 12 x 4 = 48 decode tokens.
TREE_TOKENS, PROMPT_TOKENS, CACHED_TOKENS, DECODE_TOKENS = 128, 624, 496, 48


def test_fleet_aggregate_sums_the_workers(workers):
    """Per-worker ledgers are what each served (two 512-token pools, 128 evictable tokens
    each, 512 - 128 free) and sum into the aggregate."""
    (url_a, _), (url_b, _) = workers
    document = inspect_json("--url", url_a, "--url", url_b)
    ledgers = [w["snapshot"]["ledger"] for w in document["workers"]]
    per_worker = [(ledger["pool_tokens"], ledger["evictable_tokens"], ledger["free_tokens"],
                   ledger["used_tokens"]) for ledger in ledgers]
    assert per_worker == [(512, TREE_TOKENS, 512 - TREE_TOKENS, 0)] * 2
    aggregate = document["aggregate"]["snapshot"]["ledger"]
    assert (aggregate["pool_tokens"], aggregate["evictable_tokens"], aggregate["free_tokens"]) == (
        1024, 2 * TREE_TOKENS, 2 * (512 - TREE_TOKENS))


def test_each_worker_counts_what_it_served(workers):
    """SGLang's tokenizer counters, read remotely: 12 finished requests, 624 prompt tokens,
    496 cached, 48 decoded per worker; the mirror holds the 32 pages in the tree."""
    (url_a, _), (url_b, _) = workers
    document = inspect_json("--url", url_a, "--url", url_b)
    counters = [w["snapshot"]["counters"] for w in document["workers"]]
    assert [(c["requests_finished"], c["prompt_tokens"], c["hit_tokens"], c["decode_tokens"])
            for c in counters] == [(12, PROMPT_TOKENS, CACHED_TOKENS, DECODE_TOKENS)] * 2
    assert [w["mirror"]["blocks"] for w in document["workers"]] == [TREE_TOKENS // 4] * 2


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

"""PLACE FOR THE PLUGIN'S END-TO-END TEST (issue 11 with issue 12): kvctl's SGLang plugin,
loaded by SGLang's own `load_plugins()` inside a real scheduler, reports a ledger with
residual 0 and delta_ref max 0 while requests run.

It needs two pieces built on other branches: the plugin (`engine_adapter.plugin`, entry
point `kvctl` in `sglang.srt.plugins`, branch `plugin`) and the client flag
`kvctl inspect --plugin-url` (branch `remote`). Until both are merged the test is skipped
with that reason printed (pytest -ra); nothing else in tests/e2e depends on it. It starts
its own server (KVCTL_SGLANG_PLUGIN=1) so the plugin never changes the shared one.

The same server records (KVCTL_RECORD=1): `kvctl record` takes a trace from it and
`kvctl replay` reads the trace back (issue 15's recording from a real server).
"""

from __future__ import annotations

import importlib.util
import json
import threading

import pytest

from e2e.kvctl_cli import kvctl, kvctl_json, shared_prefix_prompts
from e2e.sglang_server import PAGE, SGLangServer, free_port, skip_reason


def _missing() -> str | None:
    if reason := skip_reason():
        return reason
    if importlib.util.find_spec("engine_adapter.plugin") is None:
        return "kvctl's SGLang plugin (engine_adapter.plugin, branch plugin) is not merged yet"
    if "--plugin-url" not in kvctl("inspect", "--help").stdout:
        return "kvctl inspect has no --plugin-url yet (the remote client, branch remote)"
    return None


pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def plugin_server(tmp_path_factory):
    """A second real server with the plugin enabled (the shared one stays plugin-free), and
    recording on (KVCTL_RECORD=1, blocks of the server's page) for test_record_...: its
    context is 1,024 tokens (the pool's size) so that a prompt can hold a whole block."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    port = free_port()
    server = SGLangServer(tmp_path_factory.mktemp("sglang-plugin"),
                          extra_args=("--context-length", "1024"),
                          extra_env={"KVCTL_SGLANG_PLUGIN": "1", "KVCTL_PLUGIN_PORT": str(port),
                                     "KVCTL_PLUGIN_LEDGER_S": "0.2", "KVCTL_RECORD": "1"})
    server.plugin_url = f"http://127.0.0.1:{port}"
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_plugin_ledger_balances_while_requests_run(plugin_server):
    """With requests decoding, the plugin's ledger has residual 0, protected/private are
    numbers (None without the plugin) and no node's lock_ref differs from its leases."""
    prompts = shared_prefix_prompts(4 * PAGE, 2 * PAGE, 4, base=400)
    senders = [threading.Thread(target=plugin_server.generate, args=(ids,),
                                kwargs={"max_new_tokens": 64}) for ids in prompts]
    for sender in senders:
        sender.start()
    try:
        doc = kvctl_json("inspect", "--url", plugin_server.url,
                         "--plugin-url", plugin_server.plugin_url)
    finally:
        for sender in senders:
            sender.join(300)
    ledger, refs = doc["snapshot"]["ledger"], doc["snapshot"]["refs"]
    assert ledger["protected_tokens"] is not None and ledger["private_tokens"] is not None
    assert doc["derived"]["residual_tokens"] == 0
    assert refs is not None and refs["off_nodes"] == []  # delta_ref max 0
    assert refs["recorded_protected_tokens"] == refs["derived_protected_tokens"]


def _drain_records(plugin_url: str) -> None:
    """Acknowledge everything recorded so far (the warm-up, earlier tests' requests), as a
    previous reader would, so the next reader starts at this test's requests."""
    from kvctl.record.client import RecordsClient

    client = RecordsClient(plugin_url, token=None)
    while client.poll().records:  # each poll acks the page before it
        pass


def test_record_from_the_real_server_replays_its_shared_prefix(plugin_server, tmp_path):
    """Three prompts sent to the real server (the first two share their first 512 tokens,
    one Mooncake block; the third shares nothing), recorded by `kvctl record` through the
    plugin with --block-tokens 512 (Mooncake's blocks, coarsened from the server's page
    blocks), then replayed: the trace has their lengths and block ids [0, 1], [0, 2], [3],
    and the replay finds the shared block as 512 hit tokens, nothing else."""
    assert plugin_server.flush_cache(wait_s=30)
    _drain_records(plugin_server.plugin_url)
    shared = [1 + i % 500 for i in range(512)]  # token ids below the vocabulary's 512
    prompts = [shared + [300] * 88, shared + [301] * 10, list(range(2, 302))]
    for ids in prompts:
        plugin_server.generate(ids, max_new_tokens=1)
    trace = tmp_path / "t.jsonl"
    done = kvctl("record", "--url", plugin_server.url, "--plugin-url", plugin_server.plugin_url,
                 "--out", str(trace), "--max-requests", "3", "--duration", "60s",
                 "--block-tokens", "512")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["input_length"], r["output_length"], r["hash_ids"]) for r in rows] == [
        (600, 1, [0, 1]), (522, 1, [0, 2]), (300, 1, [3])]
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    replayed = kvctl("replay", str(trace), "--json", timeout_s=300)  # imports SGLang
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert (report["requests"], report["prompt_tokens"]) == (3, 600 + 522 + 300)
    assert report["hit_tokens"] == 512  # the second prompt's first block, the first's


def _round_trip_traffic(seed: int = 29) -> list[list[int]]:
    """36 prompts of 130 to 330 tokens over three shared prefixes of 200, 120 and 264 tokens
    (none page-aligned at its end, all below one 512-token block), some repeated whole,
    in a seeded order: sharing that 512-token blocks cannot see."""
    import random

    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 512) for _ in range(n)] for n in (200, 120, 264)]
    prompts = []
    for index in range(36):
        prefix = prefixes[index % 3]
        suffix = [rng.randrange(1, 512) for _ in range(rng.randrange(10, 67))]
        prompts.append(prefix + suffix)
    prompts += [prompts[3], prompts[10]]  # whole-prompt repeats
    rng.shuffle(prompts)
    return prompts


def test_a_recording_replayed_with_the_servers_settings_gives_its_cached_tokens(
        plugin_server, tmp_path):
    """Traffic sharing prefixes shorter than 512 tokens, sent one request at a time while
    `kvctl record` runs (default blocks: the server's page), replayed with the server's page
    size, pool and eviction policy: the replay's hit tokens equal the sum of SGLang's own
    per-request `cached_tokens` exactly, in a pool small enough to evict."""
    import subprocess
    import sys

    from e2e.sglang_server import ROOT

    assert plugin_server.flush_cache(wait_s=30)
    _drain_records(plugin_server.plugin_url)
    prompts = _round_trip_traffic()
    trace = tmp_path / "rt.jsonl"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "kvctl", "record", "--url", plugin_server.url, "--plugin-url",
         plugin_server.plugin_url, "--out", str(trace), "--max-requests", str(len(prompts)),
         "--duration", "240s"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        cached = [plugin_server.generate(ids, max_new_tokens=3)["meta_info"]["cached_tokens"]
                  for ids in prompts]
        _out, err = recorder.communicate(timeout=300)
    finally:
        if recorder.poll() is None:
            recorder.kill()
    assert recorder.returncode == 0, err
    info = plugin_server.server_info()
    meta = json.loads((tmp_path / "rt.meta.json").read_text())
    assert (meta["block_tokens"], meta["requests"]) == (info["page_size"], len(prompts))
    replayed = kvctl("replay", str(trace), "--page-size", str(info["page_size"]),
                     "--pool-tokens", str(info["max_total_num_tokens"]),
                     "--eviction", info["radix_eviction_policy"], "--json", timeout_s=300)
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["prompt_tokens"] == sum(len(ids) for ids in prompts)
    assert report["evicted_tokens"] > 0  # the pool (1,024 tokens) was under pressure
    assert report["hit_tokens"] == sum(cached)

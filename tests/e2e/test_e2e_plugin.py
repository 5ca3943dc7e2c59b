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
import subprocess
import sys
import threading

import pytest

from e2e.kvctl_cli import kvctl, kvctl_json, shared_prefix_prompts
from e2e.sglang_server import PAGE, ROOT, SGLangServer, free_port, skip_reason


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
    recording on (KVCTL_RECORD=1, Mooncake's 512-token blocks) for test_record_...: its
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
    plugin, then replayed: the trace has their lengths and block ids [0, 1], [0, 2], [3],
    and the replay finds the shared block as 512 hit tokens, nothing else."""
    assert plugin_server.flush_cache(wait_s=30)
    _drain_records(plugin_server.plugin_url)
    shared = [1 + i % 500 for i in range(512)]  # token ids below the vocabulary's 512
    prompts = [shared + [300] * 88, shared + [301] * 10, list(range(2, 302))]
    for ids in prompts:
        plugin_server.generate(ids, max_new_tokens=1)
    trace = tmp_path / "t.jsonl"
    done = kvctl("record", "--url", plugin_server.url, "--plugin-url", plugin_server.plugin_url,
                 "--out", str(trace), "--max-requests", "3", "--duration", "60s")
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


def test_gpu_check_hits_probe_agrees_with_sglang(plugin_server):
    """benchmarks/gpu_check_load.py `hits` (the GPU check's hit comparison), run here against
    the CPU server: the plugin's hit-token counter over 8 shared-prefix requests equals the
    cached tokens SGLang's replies report, every request is counted finished, and some hit."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check_load.py"), "hits",
         "--url", plugin_server.url, "--plugin-url", plugin_server.plugin_url,
         "--requests", "8", "--concurrency", "2", "--groups", "2", "--prefix", "64",
         "--suffix", "8", "--new-tokens", "2", "--vocab", "512"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["equal"] is True and result["plugin_finished"] == 8
    assert result["plugin_hit_tokens"] == result["sglang_cached_tokens"] > 0

"""kvctl's SGLang plugin end to end: loaded by SGLang's own `load_plugins()` inside a real
`sglang.launch_server` scheduler on this CPU, its own ledger balances while requests hold
KV, its refcount reconciliation finds every lock explained, and its hit and prompt counts
are the sums of SGLang's own replies.

The plugin (`engine_adapter.plugin`, entry point `kvctl` in `sglang.srt.plugins`) and the
client flag `kvctl inspect --plugin-url` are part of kvctl; a failure to load or run either
fails here, never skips. The test starts its own server (KVCTL_SGLANG_PLUGIN=1) so the plugin
never changes the shared one.

The same server records (KVCTL_RECORD=1): `kvctl record` takes a trace from it and
`kvctl replay` reads the trace back (issue 15's recording from a real server).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from e2e.kvctl_cli import kvctl, kvctl_json, shared_prefix_prompts
from e2e.plugin_server import started_plugin_server
from e2e.sglang_server import PAGE, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def plugin_server(tmp_path_factory):
    """A second real server with the plugin enabled (the shared one stays plugin-free),
    sampling every 0.2 s, each sample with a per-node tree read (KVCTL_PLUGIN_TREE_S equal to
    the ledger period: a busy window of well under a second, as four 96-token decodes on the
    tiny model can be on a fast runner, must still see one; CI once saw none at 0.4 s), and
    recording on
    (KVCTL_RECORD=1, blocks of the server's page) for test_record_...: its context is 1,024
    tokens (the pool's size) so that a prompt can hold a whole block."""
    with started_plugin_server(tmp_path_factory.mktemp("sglang-plugin"),
                               extra_args=("--context-length", "1024"),
                               env={"KVCTL_PLUGIN_LEDGER_S": "0.2", "KVCTL_PLUGIN_TREE_S": "0.2",
                                    "KVCTL_RECORD": "1"}) as server:
        yield server


def plugin_snapshot(plugin_url: str) -> dict:
    """The plugin's own latest sample: GET /snapshot's `snapshot` document."""
    with urllib.request.urlopen(f"{plugin_url}/snapshot", timeout=10) as reply:
        return json.loads(reply.read())["snapshot"]


def fresh_snapshot(plugin_url: str) -> dict:
    """A sample the plugin takes after this call began (the published one may be older: an
    idle scheduler samples from its idle loop, about once a second)."""
    seen = plugin_snapshot(plugin_url)["seq"]
    return _until(lambda: (s := plugin_snapshot(plugin_url))["seq"] > seen and s, 60,
                  "a fresh plugin sample")


def sample_while(plugin_url: str, busy: threading.Event) -> list[dict]:
    """Every distinct sample (by seq) the plugin publishes while `busy` is set."""
    samples: dict[int, dict] = {}
    while busy.is_set():
        snap = plugin_snapshot(plugin_url)
        samples.setdefault(snap["seq"], snap)
        time.sleep(0.05)
    return [samples[seq] for seq in sorted(samples)]


def test_plugin_ledger_balances_while_requests_run(plugin_server):
    """One prompt primes a 4-page prefix, then four prompts sharing it decode 96 tokens each
    at once. In every plugin sample taken while requests hold KV (leases > 0): free +
    evictable + protected + private = the pool (the plugin's own reads of SGLang's allocator,
    tree and requests; SGLang's gauges are not involved), and every per-node read
    (nodes_checked > 0, at least one) finds no node whose lock_ref its leases do not explain.
    Afterwards the plugin's prompt and hit tokens grew by exactly the sums of SGLang's own
    replies (`prompt_tokens`, `cached_tokens`; each hit is below S_cap = prompt - 1, so the
    plugin's min(hit, S_cap) is SGLang's number)."""
    assert plugin_server.flush_cache(wait_s=30)
    before = fresh_snapshot(plugin_server.plugin_url)["counters"]
    prefix, *prompts = shared_prefix_prompts(4 * PAGE, 2 * PAGE, 5, base=400)
    replies = [plugin_server.generate(prefix[:4 * PAGE])]
    busy = threading.Event()
    busy.set()
    sampled: list[list[dict]] = []
    sampler = threading.Thread(target=lambda: sampled.append(
        sample_while(plugin_server.plugin_url, busy)))
    senders = [threading.Thread(target=lambda ids=ids: replies.append(
        plugin_server.generate(ids, max_new_tokens=96))) for ids in prompts]
    sampler.start()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(300)
    busy.clear()
    sampler.join(60)
    assert len(replies) == 5, "a request did not come back"

    held = [s for s in sampled[0] if s["refs"]["leases"]]
    assert held, f"no sample saw a request holding KV ({len(sampled[0])} samples)"
    for snap in held:
        ledger = snap["ledger"]
        terms = (ledger["free_tokens"], ledger["evictable_tokens"], ledger["protected_tokens"],
                 ledger["private_tokens"])
        assert sum(terms) == ledger["pool_tokens"], (snap["seq"], terms, ledger["pool_tokens"])
    assert any(s["ledger"]["private_tokens"] > 0 for s in held)
    per_node = [s["refs"] for s in held if s["refs"]["nodes_checked"]]
    assert per_node, "no per-node read while requests held KV"
    for refs in per_node:
        assert refs["off_nodes"] == []  # delta_ref max 0
        assert refs["recorded_protected_tokens"] == refs["derived_protected_tokens"]

    after = fresh_snapshot(plugin_server.plugin_url)["counters"]  # every reply is back
    assert after["requests_finished"] - before["requests_finished"] == 5
    sent_prompt = sum(r["meta_info"]["prompt_tokens"] for r in replies)
    sent_hits = sum(r["meta_info"]["cached_tokens"] for r in replies)
    assert sent_hits > 0  # the four shared the primed prefix
    assert after["prompt_tokens"] - before["prompt_tokens"] == sent_prompt
    assert after["hit_tokens"] - before["hit_tokens"] == sent_hits


def _until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_inspect_shows_the_plugins_terms_as_numbers(plugin_server):
    """`kvctl inspect --plugin-url` reads the plugin: protected and private tokens are
    numbers (None without the plugin), and the plugin's per-node check is clean."""
    doc = kvctl_json("inspect", "--url", plugin_server.url,
                     "--plugin-url", plugin_server.plugin_url)
    ledger, refs = doc["snapshot"]["ledger"], doc["snapshot"]["refs"]
    assert isinstance(ledger["protected_tokens"], int)
    assert isinstance(ledger["private_tokens"], int)
    assert refs is not None and refs["off_nodes"] == []


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

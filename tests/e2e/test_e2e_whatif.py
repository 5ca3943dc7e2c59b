"""The live what-if curve on a real SGLang server (CPU) with kvctl's plugin loaded: the
plugin's /snapshot carries the estimate at 0.25x .. 8x the pool, the exporter publishes
it as kvctl_whatif_hit_ratio{pool_scale}, and `kvctl inspect` prints the 2x line.

The shadow runs at rate 1 here (KVCTL_PLUGIN_WHATIF_RATE=1), so it is an exact LRU over
the server's page stream and the expected values are exact: three 24-token prompts sharing
a 16-token prefix (page 4), sent one at a time with one output token each, hit 16 tokens
twice, as SGLang itself reports, at every pool scale (the smallest, 256 tokens, holds
them all). Then traffic that evicts at 1x: CYCLE_PROMPTS distinct 101-token prompts sent
twice in the same order, a cycle of 400 pages, so that a pool smaller than the cycle (an
LRU) hits nothing on the second pass and one that holds it hits every matchable page: the
scales answer differently, in order.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from e2e.kvctl_cli import kvctl, shared_prefix_prompts
from e2e.plugin_server import started_plugin_server
from e2e.sglang_server import PAGE
from support.telemetry_fixtures import ExporterProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCALES = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
CYCLE_PROMPTS, CYCLE_TOKENS = 16, 101
# distinct first tokens (k * 101 mod 500), so no two prompts share a page; ids below 512
CYCLE = [[(k * CYCLE_TOKENS + j) % 500 + 1 for j in range(CYCLE_TOKENS)]
         for k in range(CYCLE_PROMPTS)]


@pytest.fixture(scope="module")
def whatif_server(tmp_path_factory):
    """A real server with the plugin and its what-if shadow at rate 1."""
    # --mem-fraction-static 0.3 (the pool stays --max-total-tokens): on a busy shared machine
    # free memory moves during start-up and SGLang refuses 0.05 ("no memory for the KV cache")
    with started_plugin_server(tmp_path_factory.mktemp("sglang-whatif"),
                               extra_args=("--mem-fraction-static", "0.3"),
                               env={"KVCTL_PLUGIN_LEDGER_S": "0.2",
                                    "KVCTL_PLUGIN_WHATIF_RATE": "1"}) as server:
        yield server


def _whatif(plugin_url: str) -> dict:
    with urllib.request.urlopen(f"{plugin_url}/snapshot", timeout=10) as reply:
        snapshot = json.loads(reply.read())["snapshot"]
    return snapshot["whatif"] | {"pool": snapshot["info"]["pool_tokens"]}


def _hit_tokens(whatif: dict) -> list[float]:
    """Per scale, the estimated hit tokens so far (H x prompt tokens; exact at rate 1)."""
    return [p["hit_rate"] * whatif["prompt_tokens"] if p["hit_rate"] is not None else 0.0
            for p in whatif["points"]]


def _after(plugin_url: str, requests: int, timeout_s: float = 60.0) -> dict:
    """The plugin's what-if reading once it has seen `requests` requests and has not
    changed for a second (the snapshot is re-sampled on a cadence: a read right after a
    request may still be the one before it)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        whatif = _whatif(plugin_url)
        if whatif["requests"] >= requests and whatif == last:
            return whatif
        last = whatif
        time.sleep(1.0)
    raise AssertionError(f"the plugin's shadow never settled on {requests} requests")


def test_snapshot_carries_the_whatif_curve_and_its_trust_check(whatif_server):
    """Every scale is present with its pool; over the three prompts each scale gains the 32
    hit tokens SGLang itself reported, and so does the measured figure."""
    before = _after(whatif_server.plugin_url, 0)
    replies = [whatif_server.generate(ids)
               for ids in shared_prefix_prompts(4 * PAGE, 2 * PAGE, 3, base=200)]
    reported = sum(r["meta_info"]["cached_tokens"] for r in replies)
    after = _after(whatif_server.plugin_url, before["requests"] + 3)
    assert reported == 2 * 4 * PAGE
    assert [p["pool_scale"] for p in after["points"]] == SCALES
    assert [p["pool_tokens"] for p in after["points"]] == [int(s * after["pool"]) for s in SCALES]
    gained = [b - a for a, b in zip(_hit_tokens(before), _hit_tokens(after))]
    assert gained == pytest.approx([reported] * len(SCALES), abs=1e-6)
    measured = (after["measured_hit_rate"] * after["prompt_tokens"]
                - (before["measured_hit_rate"] or 0.0) * before["prompt_tokens"])
    assert measured == pytest.approx(reported, abs=1e-6)
    assert after["sample_rate"] == 1.0 and after["assumption"] == "LRU"


@pytest.fixture(scope="module")
def evicting_traffic(whatif_server):
    """The cycle sent twice, one prompt at a time: (shadow before, shadow after, replies)."""
    before = _after(whatif_server.plugin_url, 0)
    replies = [whatif_server.generate(ids) for _ in range(2) for ids in CYCLE]
    after = _after(whatif_server.plugin_url, before["requests"] + len(replies))
    return before, after, replies


def test_traffic_that_evicts_at_1x_is_estimated_higher_at_larger_scales(evicting_traffic):
    """Each prompt is 25 full pages, all matchable ((101 - 1) // 4), and between its two
    uses the 15 others insert 375 pages: a scale of at least 400 pages (the cycle) hits all
    16 x 100 tokens on the second pass, a smaller one none (no scale falls between 375 and
    400 pages, where part of a prompt would survive). So the estimates differ by scale,
    never decrease with it, and 1x (256 pages) hits nothing, as SGLang itself reports."""
    before, after, replies = evicting_traffic
    pages = CYCLE_TOKENS // PAGE
    assert (CYCLE_TOKENS - 1) // PAGE == pages  # every full page is matchable
    cycle = CYCLE_PROMPTS * pages
    sizes = [scale * after["pool"] / PAGE for scale in SCALES]
    assert not any(cycle - pages < size < cycle for size in sizes), sizes
    expected = [CYCLE_PROMPTS * pages * PAGE if size >= cycle else 0 for size in sizes]
    gained = [b - a for a, b in zip(_hit_tokens(before), _hit_tokens(after))]
    assert gained == pytest.approx(expected, abs=1e-6), (sizes, gained)
    assert all(a <= b for a, b in zip(gained, gained[1:])), gained
    assert gained[0] < gained[-1], gained
    reported = sum(r["meta_info"]["cached_tokens"] for r in replies)
    assert reported == gained[SCALES.index(1.0)] == 0  # the server evicts as its 1x does


def _number(text: str, prefix: str) -> float:
    """The value of the exposition line that starts with `prefix`."""
    (line,) = [l for l in text.splitlines() if l.startswith(prefix)]
    return float(line.rsplit(" ", 1)[1])


def test_exporter_and_inspect_show_the_whatif_curve(whatif_server, evicting_traffic):
    """`kvctl exporter` publishes kvctl_whatif_hit_ratio{pool_scale} with the plugin's own
    estimate at each scale (they differ after the evicting traffic, growing with the scale)
    and the measured ratio; `kvctl inspect` prints "2x pool: a% -> b%" with the plugin's 1x
    and 2x estimates."""
    curve = _after(whatif_server.plugin_url, evicting_traffic[1]["requests"])
    rates = [p["hit_rate"] for p in curve["points"]]
    with ExporterProcess("--url", whatif_server.url, "--plugin-url", whatif_server.plugin_url,
                         "--interval", "0.5") as exporter:
        deadline, lines = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(lines) < len(SCALES):
            with urllib.request.urlopen(exporter.url, timeout=10) as reply:
                text = reply.read().decode()
            lines = [l for l in text.splitlines() if l.startswith("kvctl_whatif_hit_ratio{")]
            time.sleep(0.5)
    assert exporter.returncode == 0, exporter.stderr
    exported = [_number(text, f'kvctl_whatif_hit_ratio{{pool_scale="{scale:g}"}}')
                for scale in SCALES]
    assert exported == pytest.approx(rates, rel=1e-9), (exported, rates)
    assert all(a <= b for a, b in zip(exported, exported[1:])) and exported[0] < exported[-1]
    assert _number(text, "kvctl_whatif_measured_hit_ratio ") == pytest.approx(
        curve["measured_hit_rate"], rel=1e-9)
    shown = kvctl("inspect", "--url", whatif_server.url, "--plugin-url", whatif_server.plugin_url)
    assert shown.returncode == 0, shown.stderr
    one, two = rates[SCALES.index(1.0)], rates[SCALES.index(2.0)]
    assert f"2x pool: {one:.1%} -> {two:.1%} " in shown.stdout, shown.stdout

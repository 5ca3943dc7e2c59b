"""`kvctl sandbox --replicas 2 --router cache_aware` end to end: two real CPU SGLang servers
(each with kvctl's plugin) behind SGLang's own router (sglang-router 0.3.2), started by the
command a user runs, shared by this module's tests (one start: about 2-3 minutes here).

What cache_aware does (sglang-router 0.3.2, HTTP requests; docs/sandbox.md "fleet"): per
request, the worker whose approximate character tree matches the most of the request text;
if that match is more than --cache-threshold (0.3) of the text, that worker; otherwise the
worker with the fewest requests in flight at the router (ties: the router's first worker).
Either way the text is then inserted in the chosen worker's tree. So here:

    group g's first request, sent while groups < g are still decoding (in flight)
        -> no tree matches (prompts share nothing across groups) -> fewest in flight:
           group 1 lands on the worker group 0 is not on; group 3 on the one group 2 is not on
    every later request of group g (64 shared + 16 own tokens: match 64/80 > 0.3)
        -> group g's worker

Which worker served each request: the request's `rid`, echoed by the worker, found in that
worker's plugin `/receipts` (kvctl/sandbox/served.py), checked against each worker's own
`sglang:num_requests_total`.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from e2e.sandbox_proc import kill_group, read_line
from e2e.sglang_server import ROOT, skip_reason
from kvctl.sandbox.served import ServedBy, new_rid
from kvctl.sandbox.tokenizer import render
from support.signals import sigint_default

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PREFIX, TURN, GROUPS = 64, 16, 4
LONG_REPLY = 400  # tokens: a first request still decodes (seconds) when the next group's goes
READY_S, STOP_S = 600, 120


def _get(url: str, timeout_s: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        return json.loads(reply.read())


def _generate(url: str, ids: list[int], *, max_new: int, rid: str) -> dict:
    body = {"text": render(ids), "rid": rid,
            "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}}
    request = urllib.request.Request(f"{url}/generate", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=180) as reply:
        return json.loads(reply.read())


def _requests_total(worker: str) -> float:
    with urllib.request.urlopen(f"{worker}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.findall(r"^sglang:num_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return sum(float(v) for v in found)






@pytest.fixture(scope="module")
def fleet():
    """(process, ready document) of one `kvctl sandbox --replicas 2` for the module."""
    if reason := skip_reason():
        pytest.skip(reason)
    import importlib.util

    if importlib.util.find_spec("sglang_router") is None:
        pytest.skip("sglang-router missing: make setup installs requirements/router.txt")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvctl", "sandbox", "--replicas", "2", "--router", "cache_aware",
         "--port", "0", "--json", "--pool-tokens", "4096", "--context-length", "1024"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default)
    doc: dict = {}
    try:
        line = read_line(proc.stdout, READY_S)
        assert line, f"no ready line in {READY_S} s; stderr: " + (
            proc.stderr.read() if proc.poll() is not None else "(still running)")
        doc = json.loads(line)
        yield proc, doc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        for pid in [doc.get("router", {}).get("pid")] + [w["pid"] for w in doc.get("workers", [])]:
            kill_group(pid)  # kvctl, killed, could not stop them


def test_ready_line_names_the_router_its_options_and_every_worker(fleet):
    _, doc = fleet
    assert doc["url"].startswith("http://127.0.0.1:")
    router = doc["router"]
    assert (router["policy"], router["cache_threshold"], router["balance_abs_threshold"],
            router["balance_rel_threshold"], router["version"]) == (
        "cache_aware", 0.3, 64, 1.5, "0.3.2")
    workers = doc["workers"]
    assert len(workers) == doc["replicas"] == 2
    assert len({w["url"] for w in workers}) == 2
    ready = _get(f"{doc['url']}/readiness")
    assert (ready["healthy_workers"], ready["total_workers"]) == (2, 2)
    listed = _get(f"{doc['url']}/workers")["workers"]
    assert {w["url"] for w in listed} == {w["url"] for w in workers}
    assert {w["model_id"] for w in listed} == {doc["model"]}  # one model: one routing tree
    for worker in workers:
        assert _get(f"{worker['plugin_url']}/healthz")["status"] == "ok"
    # the router's own metrics on the port the ready line names, counting these workers
    with urllib.request.urlopen(router["metrics_url"], timeout=10) as reply:
        text = reply.read().decode()
    for worker in workers:
        assert f'smg_worker_health{{worker="{worker["url"]}"}} 1' in text


def test_cache_aware_keeps_each_prefix_group_on_one_worker_and_uses_both(fleet):
    """4 groups through the router: the rule in the module docstring, the attribution equal
    to each worker's own request counter, and the shared prefix cached on its worker."""
    _, doc = fleet
    url = doc["url"]
    workers = [w["url"] for w in doc["workers"]]
    by = ServedBy.from_ready(doc)
    before = {w: _requests_total(w) for w in workers}
    rng = random.Random(11)
    prefixes = [[rng.randrange(1, 512) for _ in range(PREFIX)] for _ in range(GROUPS)]

    def prompt(g: int) -> list[int]:
        return prefixes[g] + [rng.randrange(1, 512) for _ in range(TURN)]

    sent: list[tuple[int, str, dict]] = []
    lock = threading.Lock()

    def send(g: int, ids: list[int], max_new: int) -> None:
        rid = new_rid("e2e-fleet")
        reply = _generate(url, ids, max_new=max_new, rid=rid)
        with lock:
            sent.append((g, rid, reply))

    firsts, running_at_send = [], []
    for g in range(GROUPS):  # each group's first request goes while the earlier ones decode
        running_at_send.append(all(t.is_alive() for t in firsts))
        thread = threading.Thread(target=send, args=(g, prompt(g), LONG_REPLY), daemon=True)
        thread.start()
        firsts.append(thread)
        time.sleep(0.3)
    for thread in firsts:
        thread.join(240)
    assert not any(t.is_alive() for t in firsts), "a first request did not answer in 240 s"
    assert all(running_at_send), f"a first request ended before the next group's was sent: " \
                                 f"{running_at_send} (the rule needs them in flight)"
    for _ in range(3):
        for g in range(GROUPS):
            send(g, prompt(g), 2)

    assert len(sent) == GROUPS * 4
    assert all(reply["meta_info"]["id"] == rid for _, rid, reply in sent)  # rid echoed
    served = by.attribute([rid for _, rid, _ in sent])
    assert by.lost == 0 and None not in served.values(), served
    assert all(len(v) == 1 for v in by.all_workers.values())  # no retry moved a request
    group_worker = {}
    for g in range(GROUPS):
        on = {served[rid] for h, rid, _ in sent if h == g}
        assert len(on) == 1, f"group {g} was split over {on}"
        group_worker[g] = on.pop()
    assert group_worker[1] != group_worker[0] and group_worker[3] != group_worker[2]
    assert set(group_worker.values()) == set(workers)  # both workers got traffic
    # later requests of a group hit its shared prefix on its worker
    for g, rid, reply in sent:
        if reply["meta_info"]["completion_tokens"] == 2:
            assert reply["meta_info"]["cached_tokens"] >= PREFIX, (g, reply["meta_info"])
    # the attribution is what each worker counted itself
    want = {w: sum(1 for v in served.values() if v == w) for w in workers}
    deadline = time.monotonic() + 15
    while (got := {w: _requests_total(w) - before[w] for w in workers}) != want:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == want


def test_a_repeated_request_through_the_router_is_served_from_cache(fleet):
    """The same text twice: the second lands on the same worker and reuses its prompt's
    pages (cached_tokens > 0; page 4, so all but the last partial page and token)."""
    _, doc = fleet
    by = ServedBy.from_ready(doc)
    ids = [random.Random(5).randrange(1, 512) for _ in range(120)]
    first, second = new_rid("e2e-repeat"), new_rid("e2e-repeat")
    a = _generate(doc["url"], ids, max_new=2, rid=first)
    b = _generate(doc["url"], ids, max_new=2, rid=second)
    assert a["meta_info"]["prompt_tokens"] == b["meta_info"]["prompt_tokens"] == len(ids)
    assert b["meta_info"]["cached_tokens"] > 0
    assert b["meta_info"]["cached_tokens"] == (len(ids) - 1) // 4 * 4
    assert by.worker_of(first) == by.worker_of(second) is not None


def test_replay_against_the_router_predicts_the_fleet(fleet, tmp_path):
    """`kvctl replay TRACE --against ROUTER`: the workers come from the router's /workers,
    every request's worker from its rid in the workers' plugin receipts, the prediction
    from the fleet replay with the workers' settings behind the cache_aware mirror.

    The trace: 4 conversations x 6 turns, 64-token blocks (sidecar), each turn's prompt its
    conversation's 2 shared blocks plus one block of its own, 8 output tokens, a turn every
    0.25 s (arrivals / 2 on the drive). Nothing is refused (prompt + output < 1,024) and
    nothing is evicted (at most 4 x 128 + 24 x 64 = 2,048 tokens of 4,096): a turn's hit is
    its conversation's shared blocks on the worker that holds them, less SGLang's last-token
    page (128 tokens on page 4: the shared prefix is page-aligned), or 0 for the first turn
    on a worker. Bounds (the measured gap the twin must stay within): every request
    attributed, the per-replica counts add up, hit rate within 2 points, equal hit tokens
    for at least 90% of requests."""
    _, doc = fleet
    trace = tmp_path / "convs.jsonl"
    rows, block = [], 100
    for turn in range(6):
        for conv in range(4):
            rows.append({"timestamp": int((turn * 4 + conv) * 250), "input_length": 3 * 64,
                         "output_length": 8, "hash_ids": [2 * conv, 2 * conv + 1, block]})
            block += 1
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "convs.meta.json").write_text(json.dumps({"block_tokens": 64}))
    done = subprocess.run(
        [sys.executable, "-m", "kvctl", "replay", str(trace), "--against", doc["url"],
         "--router", "cache_aware", "--speedup", "2", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    twin = json.loads(done.stdout)
    assert sorted(twin["workers"]) == sorted(w["url"] for w in doc["workers"])
    measured, predicted = twin["fleet"]["measured"], twin["fleet"]["predicted"]
    assert measured["requests"] == predicted["requests"] == 24
    assert twin["agreement"]["unattributed"] == 0
    assert sum(r["measured"]["requests"] for r in twin["replicas"]) == 24
    assert sum(r["predicted"]["requests"] for r in twin["replicas"]) == 24
    assert measured["prompt_tokens"] == predicted["prompt_tokens"] == 24 * 192
    # 4 conversations x 5 later turns can hit their 128 shared tokens at most
    assert 0 < measured["hit_tokens"] <= 20 * 128
    assert abs(twin["agreement"]["hit_rate_points"]) <= 2.0
    assert twin["agreement"]["hit_tokens_equal_share"] >= 0.9


def test_inspect_given_the_router_reads_every_worker(fleet):
    """`kvctl inspect --url ROUTER`: the router's /workers stand for it; each worker is read
    through its plugin, and the aggregate pool is the two 4,096-token pools."""
    _, doc = fleet
    done = subprocess.run([sys.executable, "-m", "kvctl", "inspect", "--url", doc["url"],
                           "--router-metrics", doc["router"]["metrics_url"],
                           "--json", "--wait", "0.5", "--timeout", "10"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["routers"] == [doc["url"]]
    assert sorted(w["url"] for w in report["workers"]) == sorted(w["url"] for w in doc["workers"])
    assert report["partial"] is False and report["workers_down"] == 0
    assert report["aggregate"]["snapshot"]["ledger"]["pool_tokens"] == 2 * 4096
    # the plugin's terms of each worker add up to its pool; their sum to the fleet's
    assert report["aggregate"]["derived"]["ledger_terms_tokens"] == 2 * 4096
    # the router's own figures: every request it routed went to one of the two workers
    router = report["router_metrics"]
    assert router["reachable"] is True and router["error"] is None
    assert sorted(w["url"] for w in router["workers"]) == sorted(w["url"] for w in doc["workers"])
    assert all(w["healthy"] is True and w["circuit"] == "closed" and w["failures"] == 0
               for w in router["workers"])
    assert router["requests"] > 0
    assert sum(w["requests"] for w in router["workers"]) == router["requests"]


DEAD = "http://127.0.0.1:9"  # discard port: nothing listens, a replica that is down


def _fleet_table_text(doc: dict) -> str:
    """`kvctl monitor`'s Fleet panel for the router plus a dead replica, read through
    Textual's Pilot once the first snapshot is on screen."""
    import asyncio

    tui_tests = str(ROOT / "tests" / "tui")  # the monitor tests' helpers (tui_helpers.py)
    if tui_tests not in sys.path:
        sys.path.insert(0, tui_tests)
    from tui_helpers import widget_text

    from kvctl.tui import sources
    from kvctl.tui.app import make_app
    from kvctl.tui.widgets.fleet.fleet_panel import FleetPanel, FleetTable

    plan = sources.fleet_source([doc["url"], DEAD], router_metrics=doc["router"]["metrics_url"])

    async def run() -> str:
        app = make_app(plan.build, refresh_s=0.5, label=plan.label)
        async with app.run_test(size=(160, 50)) as pilot:
            for _ in range(240):  # the first read: up to 60 s on this loaded machine
                if app.monitor.snapshot is not None:
                    break
                await pilot.pause(0.25)
            await pilot.pause(0.2)
            assert app.monitor.query_one(FleetPanel).display
            return widget_text(app.monitor.query_one(FleetTable))

    return asyncio.run(run())


def test_monitor_given_the_router_shows_every_replica_and_a_down_one_as_down(fleet):
    """`kvctl monitor`'s Fleet panel (Pilot) for the router plus a dead URL: one row per
    worker, up, with its 4,096-token pool and the router's count; the dead one DOWN with
    every figure unknown (never 0); the sum of the two pools, labelled partial."""
    _, doc = fleet
    text = _fleet_table_text(doc)
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    for worker in doc["workers"]:
        row = lines[worker["url"].removeprefix("http://")]
        assert row[1:3] == ["up", "4,096"] and row[-1] == "closed"
    dead = lines[DEAD.removeprefix("http://")]
    assert dead[1] == "DOWN" and set(dead[2:]) == {"unknown"}
    assert "all (partial: 1 of 3 down)" in text and "8,192" in lines["all"]


def test_exporter_given_the_router_feeds_the_dashboards_fleet_row(fleet, tmp_path):
    """A real Prometheus scraping `kvctl exporter --url ROUTER --url DEAD`: every query of
    the overview's fleet row returns data; the dead replica is up 0 with no pool series;
    and the router's per-replica request counts grow by what the workers' plugin receipts
    attribute to each (4 requests sent while Prometheus scrapes)."""
    from e2e.prometheus_proc import Prometheus, wait_for
    from support.dashboard_queries import is_fleet_query, panel_queries
    from support.telemetry_fixtures import ExporterProcess

    _, doc = fleet
    by = ServedBy.from_ready(doc)
    overview = ROOT / "dashboards" / "kvctl-overview.json"
    with ExporterProcess("--url", doc["url"], "--url", DEAD, "--router-metrics",
                         doc["router"]["metrics_url"], "--interval", "0.5") as exporter, \
            Prometheus(tmp_path, [exporter.instance]) as prom:
        where = f'instance="{exporter.instance}"'
        wait_for(lambda: prom.value(f"count_over_time(kvctl_router_up{{{where}}}[1m]) >= 2"),
                 60, "two scrapes of the fleet's exporter")

        def routed() -> dict[str, float]:
            return {r["metric"]["replica"]: float(r["value"][1]) for r in prom.query(
                f"sum by (replica) (kvctl_router_worker_requests_total{{{where}}})")}

        before = routed()
        rng = random.Random(23)
        rids = []
        for _ in range(4):
            rids.append(new_rid("e2e-live"))
            _generate(doc["url"], [rng.randrange(1, 512) for _ in range(24)], max_new=2,
                      rid=rids[-1])
        served = by.attribute(rids)
        want = {w["url"]: before[w["url"]] + sum(1 for v in served.values() if v == w["url"])
                for w in doc["workers"]}
        wait_for(lambda: routed() == want, 30, f"the router's counts to reach {want}")
        queries = [(n, e) for n, e in panel_queries(overview, exporter.instance)
                   if is_fleet_query(e)]
        assert len(queries) >= 7
        wait_for(lambda: not [n for n, e in queries if not prom.query(e)], 30,
                 "every fleet panel query to return data")
        dead = f'{where}, replica="{DEAD}"'
        assert prom.value(f"kvctl_replica_up{{{dead}}}") == 0
        assert prom.query(f"kvctl_replica_pool_tokens{{{dead}}}") == []
        assert prom.value(f'kvctl_fleet_replicas{{{where}, state="down"}}') == 1
        assert prom.value(f'sum(kvctl_replica_pool_tokens{{{where}, state="capacity"}})') \
            == 2 * 4096


def test_sigint_stops_the_router_and_every_worker(fleet):
    """Last: SIGINT ends kvctl with exit 0 and nothing more on stdout; the router's and every
    worker's process is gone and the fleet's temp dir removed."""
    proc, doc = fleet
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=STOP_S)
    assert proc.returncode == 0, err
    assert out == ""
    for pid in [doc["router"]["pid"]] + [w["pid"] for w in doc["workers"]]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not Path(doc["model"]).parent.exists()
